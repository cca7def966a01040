"""The README's fresh-machine commands are what CI runs."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)\n```", readme, re.S)
    test_command = next(b for b in blocks if "pytest" in b)
    ci_lines = [l for l in (ROOT / ".ci" / "run").read_text().splitlines() if l and not l.startswith(("#", "set ", "cd "))]
    assert ci_lines == [test_command]
