"""Run zerograd over the pinned real code (PyPI packages and GitHub repositories) and print what
it finds, per package and per half of the corpus.

    python benchmarks/realcode.py                  # both halves, one table each
    python benchmarks/realcode.py --split check    # only the held-apart half
    python benchmarks/realcode.py --findings       # and every finding, path:line:col: CODE message
    python benchmarks/realcode.py --update-lock    # pin new packages / repositories (then review)
    python benchmarks/realcode.py --unknowns       # and what stays unknown (benchmarks/unknowns.py)

Packages come from PyPI (realcode.lock.json: version, file, sha256); repositories from a local
mirror (ZEROGRAD_MIRROR, one git directory per repository named owner+name) or a clone at the
pinned commit (realcode.repos.lock.json), skipped with a message when neither is possible. Every
entry belongs to the *tune* or the *check* half by a hash of its name (corpus.split_of), fixed
before any review. Every finding printed here must be listed in benchmarks/REALCODE.md as a real
bug; a false positive is fixed in the analysis with a fixture instead.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import unknowns
from corpus import CACHE, extract, extract_repo, fetch, load_lock, pin_repos, update_lock

from zerograd.analysis.model import Settings
from zerograd.engine import PREFILTER, Report, inspect_source
from zerograd.io.notebook import NotebookError, read_notebook
from zerograd.io.reading import decode
from zerograd.io.suppress import unsuppressed
from zerograd.project.linking import inspect_group
from zerograd.project.plan import Project

LOCK = "realcode.lock.json"
REPOS_LOCK = "realcode.repos.lock.json"
# PyPI packages with PyTorch training code, by domain (none of ../shared/heldout-corpus.txt:
# pytorch-ignite, poutyne, stable-baselines3, d2l and cleanrl were here once and were taken out;
# the fixtures their review gave stay). Each is pinned in realcode.lock.json with its split.
DOMAINS = {
    "frameworks": (
        "transformers lightning fastai skorch mmengine mosaicml pytorch-pfn-extras deepspeed "
        "torchbearer pytorch-accelerated torchtnt hivemind keras trainer colossalai "
        "lightning-bolts"
    ),
    "nlp": (
        "speechbrain trl fairseq torchtune simpletransformers pytorch-nlp stanza adapters setfit "
        "gliner fastNLP parlai texar-pytorch farm ludwig colbert-ai flagembedding litgpt nanotron "
        "openrlhf llama-recipes peft"
    ),
    "vision": (
        "lightly pytorch-metric-learning segmentation-models-pytorch torchdistill open-clip-torch "
        "facenet-pytorch super-gradients solo-learn classy-vision mmpretrain mmsegmentation mmdet "
        "kornia effdet pytorchvideo"
    ),
    "generative": (
        "torchgan pythae normflows denoising-diffusion-pytorch imagen-pytorch dalle2-pytorch "
        "stylegan2-pytorch lightweight-gan deep-daze big-sleep k-diffusion nflows zuko audiocraft"
    ),
    "audio": (
        "asteroid pyannote-audio TTS s3prl nemo-toolkit demucs wenet"
    ),
    "rl": (
        "sample-factory agilerl DI-engine autonomous-learning-library garage machin rl4co rlberry "
        "mbrl torch-ac pearl-rl rlpyt"
    ),
    "tabular": (
        "pytorch-tabular autogluon-tabular tabpfn rtdl deepctr-torch torch-rechub cornac recbole"
    ),
    "graphs": (
        "torchdrug cogdl dive-into-graphs torch-geometric-temporal dgllife"
    ),
    "timeseries": (
        "pytorch-forecasting darts neuralforecast tsai neuralprophet gluonts"
    ),
    "probabilistic": (
        "bayesian-torch laplace-torch blitz-bayesian-pytorch torchbnn pyknos"
    ),
    "meta-continual": (
        "higher torchmeta continuum"
    ),
    "privacy-federated": (
        "fedlab crypten flwr fedml"
    ),
    "robotics": (
        "robomimic lerobot"
    ),
    "scientific": (
        "deepxde neuraloperator torchdyn torchdiffeq pina-mathlab schnetpack torchani nequip "
        "chemprop"
    ),
    "automl-compression": (
        "nni autoPyTorch archai nncf neural-compressor brevitas torch-pruning"
    ),
    "robustness-explain": (
        "adversarial-robustness-toolbox torchattacks advertorch captum torch-lucent alibi-detect"
    ),
    "snn-misc": (
        "snntorch norse spikingjelly"
    ),
    "medical": (
        "nnunetv2 torchio"
    ),
}
PACKAGES = [name for names in DOMAINS.values() for name in names.split()]
# GitHub training repositories (paper reproductions, model zoos, course code), none reserved.
REPOS = """
karpathy/minGPT karpathy/build-nanogpt karpathy/makemore pranz24/pytorch-soft-actor-critic sfujim/TD3
sfujim/BCQ seungeunrho/minimalRL kuangliu/pytorch-cifar weiaicunzai/pytorch-cifar100 facebookresearch/detr
facebookresearch/dino facebookresearch/mae facebookresearch/deit facebookresearch/drqv2
ikostrikov/pytorch-a2c-ppo-acktr-gail higgsfield/RL-Adventure higgsfield/RL-Adventure-2 ShangtongZhang/DeepRL
nikhilbarhate99/PPO-PyTorch denisyarats/pytorch_sac Kaixhin/Rainbow MishaLaskin/curl HobbitLong/RepDistiller
AberHu/Knowledge-Distillation-Zoo dragen1860/MAML-Pytorch znxlwm/pytorch-generative-model-collections
w86763777/pytorch-gan-collections rosinality/stylegan2-pytorch openai/improved-diffusion openai/guided-diffusion
NVlabs/edm WongKinYiu/yolov7 clovaai/deep-text-recognition-benchmark lucidrains/vit-pytorch
jadore801120/attention-is-all-you-need-pytorch bentrevett/pytorch-seq2seq bentrevett/pytorch-sentiment-analysis
graykode/nlp-tutorial hunkim/PyTorchZeroToAll MorvanZhou/PyTorch-Tutorial rasbt/LLMs-from-scratch
BY571/Soft-Actor-Critic-and-Extensions ChenRocks/UNITER ChenglongChen/pytorch-DRL Div99/IQ-Learn
FoundationVision/LlamaGen Kaixhin/imitation-learning Lizhi-sjtu/MARL-code-pytorch Lornatang/StarGAN-PyTorch
MorningStarTM/Intrinsic-Curiosity-Module---RL NVlabs/MUNIT NVlabs/stylegan3 RajGhugare19/dreamerv2
SKTBrain/DiscoGAN SamsungLabs/tqc_pytorch TencentARC/GFPGAN TianhongDai/reinforcement-learning-algorithms
WongKinYiu/yolor alexis-jacq/Pytorch-DPPO andrewliao11/pytorch-a3c-mujoco basiclab/GNGAN-PyTorch
burchim/DreamerV3-PyTorch bytedance/1d-tokenizer carpedm20/DiscoGAN-pytorch crazytb/uav_a3c
ctallec/world-models dchetelat/acer denisyarats/drq denisyarats/pytorch_sac_ae esteveste/dreamerV2-pytorch
facebookresearch/ConvNeXt-V2 facebookresearch/vilbert-multi-task fducau/AAE_pytorch ghliu/pytorch-ddpg
hanzhanggit/StackGAN-Pytorch hcnoh/gail-pytorch jacekplocharczyk/a3c-pytorch jingweiz/pytorch-distributed
junyanz/BicycleGAN kazuto1011/deeplab-pytorch keyu-tian/SparK khhandrea/pytorch-a3c lmzintgraf/varibad
lonePatient/Bert-Multi-Label-Text-Classification medipixel/rl_algorithms meituan/YOLOv6 mingyuliutw/UNIT
nashory/pggan-pytorch nicklashansen/tdmpc onlytailei/A3C-PyTorch ozanciga/gans-with-pytorch
pengzhiliang/MAE-pytorch reinforcement-learning-kr/lets-do-irl salesforce/CodeT5 sfujim/TD7 snu-mllab/EDAC
stanford-futuredata/ColBERT uoe-agents/seac williamSYSU/TextGAN-PyTorch xinntao/Real-ESRGAN
yihaosun1124/OfflineRL-Kit yl4579/StarGANv2-VC zhaoyi11/dreamer-pytorch zhujiagang/pytorch-a3c-gpu
znxlwm/pytorch-CycleGAN
""".split()
CODES = ["ZG001", "ZG002", "ZG003", "ZG004", "ZG005", "ZG006", "ZG900", "ZG901"]
COLUMNS = ("files", "linked", "scopes", "stepfn", "capped")
HOOKED = "hooked:"  # row keys: classes whose hooks a framework calls (drivers), per framework


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--findings", action="store_true", help="print every finding")
    parser.add_argument("--update-lock", action="store_true", help="pin new packages and repositories")
    parser.add_argument("--split", choices=("tune", "check", "all"), default="all")
    parser.add_argument("--compare-elision", action="store_true",
                        help="also analyse every file with every function body parsed; list any difference")
    parser.add_argument("--unknowns", action="store_true",
                        help="also count, per half, the loss reaches and optimizer sets left unknown")
    parser.add_argument("names", nargs="*", help="only these packages or repositories")
    args = parser.parse_args()
    COMPARED["on"] = int(args.compare_elision)
    UNKNOWNS["on"] = unknowns.Tally() if args.unknowns else None
    if args.update_lock:
        update_lock(LOCK, PACKAGES)
        pin_repos(REPOS_LOCK, REPOS)
        return 0
    entries = _entries(args.names)
    details: list[str] = []
    started = time.perf_counter()
    for split in ("tune", "check"):
        if args.split in (split, "all"):
            _table(split, [e for e in entries if e[2]["split"] == split], details)
            tally = UNKNOWNS["on"]
            if tally is not None:
                print(f"\nunknowns, {split} half (modules as analysed: alone, or in their linked group):\n{tally.report()}")
                UNKNOWNS["on"] = unknowns.Tally()
    print(f"({time.perf_counter() - started:.1f} s)")
    if args.compare_elision:
        print(f"elision compared on {COMPARED['files']} files: {len(DIFFERENCES)} differ")
        print("\n".join(DIFFERENCES))
    if args.findings:
        print("\n".join(details))
    return 0


def _entries(names: list[str]) -> list[tuple[str, str, dict[str, str]]]:
    """(kind, name, pin) of every package and repository asked for, in lock order."""
    found = [("pypi", n, p) for n, p in load_lock(LOCK).items()]
    found += [("github", n, p) for n, p in load_lock(REPOS_LOCK).items()]
    return [e for e in found if not names or e[1] in names]


def _table(split: str, entries: list[tuple[str, str, dict[str, str]]], details: list[str]) -> None:
    print(f"\n{split} half: {len(entries)} entries")
    print(f"{'package or repository':<48} " + " ".join(f"{c:>6}" for c in COLUMNS) + " "
          + " ".join(f"{c:>5}" for c in CODES))
    totals: Counter[str] = Counter()
    hooked: dict[str, list[str]] = {}
    for kind, name, pin in entries:
        root = extract(fetch(name, pin)) if kind == "pypi" else extract_repo(name, pin)
        if root is None:
            print(f"{name}: no mirror and no network: skipped")
            continue
        row = _scan(root, details)
        totals.update(row)
        label = f"{name}=={pin['version']}" if kind == "pypi" else f"{name}@{pin['commit'][:10]}"
        print(_row(label, row))
        for key in (k for k in row if k.startswith(HOOKED)):
            hooked.setdefault(key[len(HOOKED):], []).append(f"{label} {row[key]}")
    print(_row("total", totals))
    found = sum(totals[c] for c in CODES[:6])
    print(f"findings: {found} on {totals['scopes']} analysed scopes, each reviewed in REALCODE.md")
    for framework, where in sorted(hooked.items()):
        print(f"hooked classes analysed ({framework}): {totals[HOOKED + framework]}: {', '.join(where)}")


def _scan(root: Path, details: list[str]) -> Counter[str]:
    """One package or repository as one project (project.py): linked modules are analysed
    together, every other file alone."""
    row: Counter[str] = Counter()
    paths = sorted(p for p in root.rglob("*") if p.suffix in (".py", ".ipynb") and p.is_file())
    grouped = _linked(paths, row, details)
    for path in paths:
        row["files"] += 1
        if path in grouped:
            continue
        checked = _check(path)
        if checked is None:
            continue
        report, text, where = checked
        row["scopes"] += report.scopes
        row["stepfn"] += report.step_functions
        row["capped"] += report.capped
        row.update(HOOKED + framework for framework in report.hooked)
        for finding in unsuppressed(report.findings, text):
            row[finding.code] += 1
            details.append(f"{path.relative_to(CACHE / 'src')}:{where(finding)}: {finding.code} {finding.message}")
    return row


def _linked(paths: list[Path], row: Counter[str], details: list[str]) -> set[Path]:
    """Check the project's linked groups; the files they hold."""
    texts = {}
    for path in paths:
        if path.suffix == ".py":
            try:
                texts[str(path)] = decode(path.read_bytes())
            except (SyntaxError, UnicodeDecodeError, LookupError, OSError):
                continue
    if not any(PREFILTER in text for text in texts.values()):
        return set()
    project = Project(texts)
    grouped: set[Path] = set()
    for group in project.plan():
        tally = UNKNOWNS["on"]
        observe = None if tally is None else partial(unknowns.count_program, tally=tally)
        found, report = inspect_group(project, group, Settings(), observe)
        row["linked"] += len(group)
        row["scopes"] += report.scopes
        row["stepfn"] += report.step_functions
        row["capped"] += report.capped
        row.update(HOOKED + framework for framework in report.hooked)
        for name in group:
            grouped.add(Path(name))
            for finding in unsuppressed(found[name], texts[name]):
                row[finding.code] += 1
                details.append(f"{Path(name).relative_to(CACHE / 'src')}:{finding.line}:{finding.col + 1}: "
                               f"{finding.code} {finding.message} [linked]")
    return grouped


COMPARED: Counter[str] = Counter()
DIFFERENCES: list[str] = []
UNKNOWNS: dict[str, Optional[unknowns.Tally]] = {"on": None}


def _inspect(path: Path, source: str) -> Report:
    tally = UNKNOWNS["on"]
    if tally is not None:
        unknowns.count(source, tally)
    report = inspect_source(source)
    if COMPARED["on"]:
        whole = inspect_source(source, elide=False)
        COMPARED["files"] += 1
        if whole != report:
            DIFFERENCES.append(f"{path}: {whole} != {report}")
    return report


def _check(path: Path):  # type: ignore[no-untyped-def]
    """The report of one file, its text, and how to print a finding's place (cells in notebooks)."""
    try:
        text = decode(path.read_bytes())
    except (SyntaxError, UnicodeDecodeError, LookupError, OSError):
        return None
    if path.suffix == ".ipynb":
        try:
            notebook = read_notebook(text)
        except (NotebookError, ValueError):
            return None
        report: Report = _inspect(path, notebook.source)

        def cell(finding):  # type: ignore[no-untyped-def]
            placed = notebook.locate(finding)
            return f"cell_{placed.cell[0]}:{placed.cell[1]}:{finding.col + 1}" if placed.cell else f"{finding.line}"

        return report, notebook.source, cell
    return _inspect(path, text), text, lambda f: f"{f.line}:{f.col + 1}"


def _row(name: str, row: Counter[str]) -> str:
    return f"{name:<48} " + " ".join(f"{row[c]:>6}" for c in COLUMNS) + " " + " ".join(f"{row[c]:>5}" for c in CODES)


if __name__ == "__main__":
    raise SystemExit(main())
