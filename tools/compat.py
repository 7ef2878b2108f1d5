"""The framework compatibility matrix: the launcher's tests on the oldest and newest version
of each declared range, run by hand (CI runs the pinned set), written to docs/launcher.md.

Each version is installed on its own (``pip install --no-deps --target``) into a directory
that is put first on ``PYTHONPATH`` over the test environment, so the other frameworks stay
the pinned ones; then the framework's share of the tests runs against it: the names of
``tiresias_launch.compat`` and a set of the corpus's exactness tests.

    python tools/compat.py                  # the declared ranges' ends, prints the matrix
    python tools/compat.py --write          # and puts it into docs/launcher.md
    python tools/compat.py --keras 3.8.0    # one version
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "launcher.md"
BEGIN, END = "<!-- compat matrix: tools/compat.py --write -->", "<!-- end of compat matrix -->"


@dataclass(frozen=True)
class Framework:
    dist: str
    module: str  # what its version is read from
    feature: str  # its entry in tiresias_launch.compat.INTERNALS
    ends: tuple[str, str]  # the declared range's oldest and newest versions
    tests: tuple[str, ...]  # pytest arguments


FRAMEWORKS = {
    "keras": Framework(
        "keras",
        "keras",
        "keras.src.models.model",
        ("3.10.0", "3.15.1"),
        (
            "tests/launch/test_tf_data.py",
            "tests/corpus/test_fit_corpus.py",
            "-k",
            "resumed_epoch_sees or (sigterm and (directory_cache or generator_pydataset"
            " or stock_callbacks or unbuilt_sequential or tfrecord_interleave))",
        ),
    ),
    "lightning": Framework(
        "lightning",
        "lightning",
        "lightning.pytorch",
        ("2.5.0", "2.6.6"),
        ("tests/pytorch/test_lightning.py", "-k", "resumes_mid_epoch_exactly and 1"),
    ),
}


def overlay(root: Path, fw: Framework, version: str) -> Path:
    target = root / f"{fw.dist}-{version}"
    if not (target / fw.module).is_dir():
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target"]
        subprocess.run([*pip, str(target), f"{fw.dist}=={version}"], check=True)
    return target


def run(fw: Framework, version: str, target: Path) -> tuple[str, str]:
    """(result, detail) for one version."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(target), str(REPO), str(REPO / "tests")]),
    }
    env["OMP_NUM_THREADS"] = "1"
    probe = (
        f"import {fw.module} as m; from tiresias_launch import compat; "
        f"i = compat.first_missing({fw.feature!r}); print(m.__version__, i.name if i else '')"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300
    )
    line = (found.stdout.strip().splitlines() or ["?"])[-1].split(" ", 1)
    if line[0] != version:
        return "not run", f"imported {line[0]}, not {version}"
    if len(line) > 1 and line[1]:
        return "unpatched", f"has no {line[1]}: runs unpatched (said once)"
    t0 = time.monotonic()
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *fw.tests],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    lines = tests.stdout.strip().splitlines() or ["?"]
    counts = re.sub(r"=+|\s+in [\d.]+s.*", "", lines[-1]).strip()
    failed = [line.split("::")[-1].split(" ")[0] for line in lines if line.startswith("FAILED")]
    result = "exact" if tests.returncode == 0 else "fails"
    which = f"; failed: {', '.join(failed)}" if failed else ""
    return result, f"{counts} ({time.monotonic() - t0:.0f} s){which}"


def matrix(rows: list[tuple[str, str, str, str]]) -> str:
    day = datetime.date.today().isoformat()
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    lines = [
        BEGIN,
        f"Run by hand on {day} ({machine}; load average {os.getloadavg()[0]:.1f}) with "
        "`python tools/compat.py --write`; the other frameworks at their pins.",
        "",
        "| framework | version | result | tests |",
        "| --- | --- | --- | --- |",
        *(f"| {fw} | {v} | {result} | {detail} |" for fw, v, result, detail in rows),
        END,
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, fw in FRAMEWORKS.items():
        parser.add_argument(
            f"--{name}", nargs="*", metavar="VERSION", help=f"versions (default: {fw.ends})"
        )
    parser.add_argument("--root", type=Path, default=Path("/tmp/tiresias-compat"))
    parser.add_argument("--write", action="store_true", help="update docs/launcher.md")
    args = parser.parse_args(argv)
    chosen = {n: getattr(args, n) for n in FRAMEWORKS if getattr(args, n) is not None}
    todo = chosen or {n: list(fw.ends) for n, fw in FRAMEWORKS.items()}
    rows = []
    for name, versions in todo.items():
        fw = FRAMEWORKS[name]
        for version in versions:
            result, detail = run(fw, version, overlay(args.root, fw, version))
            rows.append((name, version, result, detail))
            print(f"{name} {version}: {result}, {detail}", flush=True)
    text = matrix(rows)
    print(text)
    if args.write:
        docs = DOCS.read_text()
        if BEGIN not in docs:
            print(f"{DOCS} has no {BEGIN!r} to replace", file=sys.stderr)
            return 1
        start, end = docs.index(BEGIN), docs.index(END) + len(END)
        DOCS.write_text(docs[:start] + text + docs[end:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
