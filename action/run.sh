#!/usr/bin/env bash
# The GitHub Action's one step (action.yml): install zerograd, run it, map its exit code.
# Exit codes of zerograd: 0 clean, 1 findings, 2 an error (bad config, unreadable file).
set -euo pipefail

output="${GITHUB_OUTPUT:-/dev/null}"
findings=0
status=2
sarif=""
# The outputs are written on every exit path, a failed setup included (issue 48): a later step
# that reads `exit-code` must not find it empty.
write_outputs() {
  { echo "sarif-file=$sarif"; echo "findings=$findings"; echo "exit-code=$status"; } >>"$output" 2>/dev/null || true
}
trap write_outputs EXIT
fail() { echo "::error title=zerograd::$1"; status=2; exit 2; }

case "${INPUT_FORMAT:=github}" in github | sarif) ;; *) fail "format must be github or sarif, not '$INPUT_FORMAT'" ;; esac
case "${INPUT_FAIL_ON_FINDINGS:=auto}" in true | false | auto) ;; *) fail "fail-on-findings must be true, false or auto" ;; esac
cd "${INPUT_WORKING_DIRECTORY:-.}" 2>/dev/null || fail "working-directory '${INPUT_WORKING_DIRECTORY}' is not a folder"

zerograd=zerograd
if [ "${INPUT_INSTALL:-true}" = "true" ]; then
  # A virtual environment of the action's own: the project's packages are left alone. Without a
  # version, zerograd is installed from the action's own checkout (the tag the workflow names).
  venv="${RUNNER_TEMP:-${TMPDIR:-/tmp}}/zerograd-action-venv"
  python3 -m venv "$venv" || fail "could not create a virtual environment in $venv"
  source="${GITHUB_ACTION_PATH:-$(dirname "$0")/..}"
  requirement="${INPUT_VERSION:+zerograd==$INPUT_VERSION}"
  "$venv/bin/python" -m pip install --disable-pip-version-check -q "${requirement:-$source}" \
    || fail "could not install ${requirement:-zerograd from $source}"
  zerograd="$venv/bin/zerograd"
fi
command -v "$zerograd" >/dev/null || fail "zerograd is not on PATH (install: false needs an earlier step that installs it)"

# Word splitting of paths and args is intended: they are space-separated lists. With the cache
# on, ZEROGRAD_CACHE_DIR names the folder actions/cache restores and saves (action.yml).
nocache=""
[ "${INPUT_CACHE:-true}" = "false" ] && nocache="--no-cache"
# shellcheck disable=SC2086
set -- $nocache ${INPUT_ARGS:-} -- ${INPUT_PATHS:-.}
status=0
if [ "$INPUT_FORMAT" = "sarif" ]; then
  target="${INPUT_SARIF_FILE:-zerograd.sarif}"
  # The braces take the shell's own message when the redirection fails (a file in the way).
  { mkdir -p "$(dirname "$target")" && : >"$target"; } 2>/dev/null || fail "cannot write the SARIF file '$target'"
  sarif="$target"
  "$zerograd" --format sarif "$@" >"$sarif" || status=$?
  findings=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["runs"][0]["results"]))' "$sarif" \
    2>/dev/null || echo 0)
  [ "$INPUT_FAIL_ON_FINDINGS" = "auto" ] && INPUT_FAIL_ON_FINDINGS=false
else
  annotations=$(mktemp)
  "$zerograd" --format github "$@" >"$annotations" || status=$?
  cat "$annotations"
  findings=$(grep -c '^::' "$annotations" || true)
  rm -f "$annotations"
fi
code=$status  # the exit-code output is zerograd's own, whatever fail-on-findings makes of it
if [ "$status" -eq 1 ] && [ "$INPUT_FAIL_ON_FINDINGS" = "false" ]; then
  code=0
fi
exit "$code"
