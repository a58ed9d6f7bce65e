"""Write the README's speedup table ("Does EAGLE pay here?") from the committed result files.

    python scripts/render_readme.py           # rewrite the table in README.md
    python scripts/render_readme.py --check   # exit 1 if README.md does not hold what the files give

The table lies between two markers in README.md; playground/bench/landing.py renders it
(tests/project/test_quoted_numbers.py checks the committed README against it). Run it after re-measuring any file
the table reads.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playground.bench.landing import with_table  # noqa: E402
from playground.presets import REPO_ROOT  # noqa: E402

README = REPO_ROOT / "README.md"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether README.md is up to date")
    args = parser.parse_args()
    committed = README.read_text()
    rendered = with_table(committed)
    if args.check:
        print("README.md's speedup table is up to date" if rendered == committed
              else "README.md's speedup table is stale: run python scripts/render_readme.py")
        return 0 if rendered == committed else 1
    README.write_text(rendered)
    print(f"wrote the speedup table into {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
