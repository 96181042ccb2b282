#!/usr/bin/env python3
"""Checks what ARCHITECTURE.md promises about the tree and that can be checked by
reading it (CI runs this before it builds anything):

- every crate, service and tool has a README.md whose file table names each of its
  source files (`src/**/*.rs`, in backticks, written with or without `src/`; the end-to-end
  package `tests/` also names its test files);
- queue-core does not depend on the server API (no `redis-module`, no `redis`);
- the services reach Valkey only through queue-client (no `redis` or `redis-module`
  among their dependencies; their tests may use `redis`);
- no crate but the module has `unsafe` code, and in the module only the file listed in
  UNSAFE_FILES (`server.rs`: the server's C API, for commands, module load and the
  keyspace callbacks alike).

Exits 1 and says what is wrong, else 0. Run it from anywhere: python3 scripts/check-tree.py
"""

import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# The one file that may hold `unsafe`: the module's `server.rs`, the one place it
# reaches the server's C API (command handlers, module load, server callbacks).
UNSAFE_FILES = {
    "valkey-module/src/server.rs",
}
# Packages that must not depend on the server's API or speak raw commands.
PURE = {"queue-core"}
SERVICES = {"queue-api", "queue-manager", "chat-server", "queue-gate"}
RAW = {"redis", "redis-module"}


def packages():
    out = subprocess.run(
        ["cargo", "metadata", "--no-deps", "--format-version", "1", "--offline"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out)["packages"]


def main():
    problems = []
    for pkg in packages():
        name = pkg["name"]
        pdir = pathlib.Path(pkg["manifest_path"]).parent
        rel_dir = pdir.relative_to(ROOT)

        # The README's file table.
        readme = pdir / "README.md"
        sources = sorted((pdir / "src").rglob("*.rs")) if (pdir / "src").is_dir() else []
        names = [str(f.relative_to(pdir / "src")) for f in sources]
        if name == "e2e":
            names += [f.name for f in sorted(pdir.glob("*.rs"))]
        if not readme.is_file():
            problems.append(f"{rel_dir}/README.md is missing (it lists the package's files)")
        else:
            text = readme.read_text()
            listed = set(re.findall(r"`([^`\s]+\.rs)`", text))
            for n in names:
                if n not in listed and f"src/{n}" not in listed:
                    problems.append(f"{rel_dir}/README.md does not list `{n}` in its file table")

        # Dependencies.
        normal = {d["name"] for d in pkg["dependencies"] if d.get("kind") is None}
        if name in PURE and normal & RAW:
            problems.append(f"{name} depends on {sorted(normal & RAW)}: it must not touch the server API")
        if name in SERVICES and normal & RAW:
            problems.append(f"{name} depends on {sorted(normal & RAW)}: services call Valkey through queue-client")

    # unsafe code.
    for f in sorted(ROOT.glob("**/*.rs")):
        rel = str(f.relative_to(ROOT))
        if rel.startswith(("target/", ".git/")) or "/target/" in rel:
            continue
        code = re.sub(r"//.*", "", f.read_text(errors="replace"))
        if re.search(r"\bunsafe\b", code) and rel not in UNSAFE_FILES:
            problems.append(f"{rel} has `unsafe`: only {sorted(UNSAFE_FILES)} may")

    for p in problems:
        print(f"check-tree: {p}", file=sys.stderr)
    if problems:
        print(f"check-tree: {len(problems)} problem(s); see ARCHITECTURE.md", file=sys.stderr)
        return 1
    print("check-tree: file tables, dependencies and unsafe code as ARCHITECTURE.md says")
    return 0


if __name__ == "__main__":
    sys.exit(main())
