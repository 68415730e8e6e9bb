"""A fake linter that knows the answers: for each file, one finding per `# expect:` token of its
header, at the first line of the token's range, with the token's first code. It shares no code
with benchmarks/reports.py, so the runner scoring it at 1.00 shows that the runner reads the
headers as they are written. With --drop NAME it leaves out the findings of that file."""

import sys

args = sys.argv[1:]
drop = args[args.index("--drop") + 1] if "--drop" in args else None
for path in (a for a in args if a.endswith(".py")):
    if drop and path.endswith(drop):
        continue
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.startswith("#"):
                break
            if line.startswith("# expect:"):
                for token in line.split(":", 1)[1].split():
                    if token != "clean":
                        code, lines = token.split("@")
                        print(f"{path}:{lines.split('-')[0]}:1: {code.split('|')[0]} answer")
