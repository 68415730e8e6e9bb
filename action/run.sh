#!/usr/bin/env bash
# The GitHub Action's one step (action.yml): install zerograd, run it, map its exit code.
# Exit codes of zerograd: 0 clean, 1 findings, 2 an error (bad config, unreadable file).
set -euo pipefail

fail() { echo "::error title=zerograd::$1"; exit 2; }

case "${INPUT_FORMAT:=github}" in github | sarif) ;; *) fail "format must be github or sarif, not '$INPUT_FORMAT'" ;; esac
case "${INPUT_FAIL_ON_FINDINGS:=auto}" in true | false | auto) ;; *) fail "fail-on-findings must be true, false or auto" ;; esac

if [ "${INPUT_INSTALL:-true}" = "true" ]; then
  requirement="zerograd${INPUT_VERSION:+==$INPUT_VERSION}"
  python3 -m pip install --disable-pip-version-check -q "$requirement" || fail "could not install $requirement"
fi
command -v zerograd >/dev/null || fail "zerograd is not on PATH (install: false needs an earlier step that installs it)"

# Word splitting of paths and args is intended: they are space-separated lists.
# shellcheck disable=SC2086
set -- ${INPUT_ARGS:-} -- ${INPUT_PATHS:-.}
status=0
if [ "$INPUT_FORMAT" = "sarif" ]; then
  sarif="${INPUT_SARIF_FILE:-zerograd.sarif}"
  zerograd --format sarif "$@" >"$sarif" || status=$?
  echo "sarif-file=$sarif" >>"${GITHUB_OUTPUT:-/dev/null}"
  [ "$INPUT_FAIL_ON_FINDINGS" = "auto" ] && INPUT_FAIL_ON_FINDINGS=false
else
  zerograd --format github "$@" || status=$?
  echo "sarif-file=" >>"${GITHUB_OUTPUT:-/dev/null}"
fi
if [ "$status" -eq 1 ] && [ "$INPUT_FAIL_ON_FINDINGS" = "false" ]; then
  status=0
fi
exit "$status"
