"""A function whose body elision cut (it performs no event, and the module builds fewer than
two optimizers) returns an unknown value for the reach of a loss, not nothing (session 33:
OfflineRL-Kit's SAC actor loss, computed from `self.actforward(obs)`, missed its actor)."""

from __future__ import annotations

from pathlib import Path

from zerograd.analysis.model import Event, Node, Program, Reach, Settings, children
from zerograd.project.linking import inspect_group
from zerograd.project.plan import Project

AGENT = '''
import torch


class SACPolicy:
    def __init__(self, actor, critic, actor_optim, critic_optim):
        self.actor = actor
        self.critic = critic
        self.actor_optim = actor_optim
        self.critic_optim = critic_optim

    def actforward(self, obs, deterministic=False):
        dist = self.actor(obs)
        if deterministic:
            action, raw = dist.mode()
        else:
            action, raw = dist.rsample()
        log_prob = dist.log_prob(action, raw)
        return action, log_prob

    def learn(self, obs):
        critic_loss = self.critic(torch.cat([obs, obs[:, :2]], 1)).pow(2).mean()
        self.critic_optim.zero_grad()
        critic_loss.backward()
        self.critic_optim.step()
        a, log_probs = self.actforward(obs)
        actor_loss = -self.critic(torch.cat([obs, a], 1)).mean()
        self.actor_optim.zero_grad()
        actor_loss.backward()
        self.actor_optim.step()
'''

DISTS = '''
import torch


class TanhNormal(torch.distributions.Normal):
    def rsample(self):
        raw = super().rsample()
        return torch.tanh(raw), raw

    def mode(self):
        raw = self.mean
        return torch.tanh(raw), raw

    def log_prob(self, action, raw):
        return super().log_prob(raw).sum(-1)


class Gaussian(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mu = torch.nn.Linear(4, 2)

    def forward(self, logits):
        return TanhNormal(self.mu(logits), 1.0)
'''

ACTORS = '''
import torch.nn as nn


class ActorProb(nn.Module):
    def __init__(self, backbone, dist_net):
        super().__init__()
        self.backbone = backbone
        self.dist_net = dist_net

    def forward(self, obs):
        return self.dist_net(self.backbone(obs))
'''

RUN = '''
import torch
import torch.nn as nn

from actors import ActorProb
from agent import SACPolicy
from dists import Gaussian

actor, critic = ActorProb(nn.Linear(3, 4), Gaussian()), nn.Linear(5, 1)
policy = SACPolicy(actor, critic, torch.optim.Adam(actor.parameters()), torch.optim.Adam(critic.parameters()))
policy.learn(torch.randn(4, 3))
'''


def reach_of_the_loss(tmp_path: Path) -> Reach:
    """The reach of the loss in `learn`, the agent linked with the script that builds it."""
    for name, text in (("agent", AGENT), ("dists", DISTS), ("actors", ACTORS)):
        (tmp_path / f"{name}.py").write_text(text, encoding="utf-8")
    (tmp_path / "run.py").write_text(RUN, encoding="utf-8")
    project = Project({str(p): p.read_text(encoding="utf-8") for p in sorted(tmp_path.glob("*.py"))})
    found: list[Reach] = []

    def observe(program: Program) -> None:
        stack: list[Node] = [f.body for f in program.functions]
        while stack:
            node = stack.pop()
            if isinstance(node, Event) and node.label == "actor_loss.backward()" and node.reach is not None:
                found.append(node.reach)
            stack.extend(children(node))

    for group in project.plan():
        if any(path.endswith("agent.py") for path in group):
            inspect_group(project, group, Settings(), observe)
    assert found, "no backward with a reach"
    return found[-1]


def test_a_helper_cut_by_elision_is_unknown_not_empty(tmp_path: Path) -> None:
    # The actor's loss: the critic of an action from `self.actforward(obs)`, which this module
    # cannot run (its actor's and distribution's classes are in modules of no group).
    reach = reach_of_the_loss(tmp_path)
    assert "self.critic" in reach.modules
    assert "self.actor" in reach.modules or reach.opaque  # never known and missing the actor
