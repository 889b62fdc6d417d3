"""Every fenced ``python`` block of README.md and docs/*.md runs: each doc's blocks in order, in a
fresh folder, in one subprocess per doc (tests/docs_data/run_blocks.py), as notebook cells run.

A block is run in a fresh namespace unless an HTML comment right before its fence says otherwise,
``<!-- docs-test: PART; PART -->``, each PART one of:

- ``continues``: the block runs in the previous block's namespace;
- ``file NAME``: the block is a file the page asks the reader to save: it is written to NAME in the
  working folder and imported there;
- ``given NAME, NAME``: names the page leaves to the reader (the user's ``fit`` and ``items``),
  taken from tests/docs_data/given.py;
- ``needs slurm|gpu|cluster: REASON``: the block needs what this machine may lack. Alone, it
  is compiled and every name it takes from our packages looked up (with the keywords of our
  calls), but not run;
- ``env KEY=VALUE``: set in the environment before the block runs (and kept for the blocks
  after it), for what the page says the reader's environment holds (by default the test's,
  with 8 emulated CPU devices: ``XLA_FLAGS=--xla_force_host_platform_device_count=8``);
- ``here KEY=VALUE, ...``: with ``needs``, the block runs after all, with these keyword values
  replaced in its calls (a cluster's partition and sizes for this machine's, the GPU backend
  for a CPU one). A ``needs slurm`` block runs on the real Slurm here (require(): CI fails if
  none answers).

No block is left out: one that is not run says why in its marker. tests/lsq/test_lsq_docs.py
also runs docs/lsq.md and checks its figures; this test owns the markers of every page.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

if __name__ == "__main__":  # run as a script: the project first, before tests/ (whose folders
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # named like packages hide them)

import pytest

from campaign import read_ledger
from schedulers.slurm import slurm_available
from testkit import PYTHON, ROOT, child_env, require

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNER = ROOT / "tests" / "docs_data" / "run_blocks.py"
FENCE = re.compile(r"^( *)```(\S*)\s*$")
MARKER = re.compile(r"^\s*<!-- docs-test: (.*?) -->\s*$")
NEEDS = ("slurm", "gpu", "cluster")


@dataclass
class Block:
    doc: str
    line: int  # the first code line, 1-based
    code: str
    marker: str = ""
    continues: bool = False
    given: list[str] = field(default_factory=list)
    needs: str = ""  # "slurm", "gpu" or "cluster"
    reason: str = ""
    here: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    file: str = ""

    @property
    def mode(self) -> str:
        if self.file:
            return "file"
        if self.needs and not self.here:
            return "check"
        return "run"


def parse_marker(block: Block, text: str) -> None:
    where = f"{block.doc}:{block.line - 1}"
    for part in (p.strip() for p in text.split(";")):
        word, _, rest = part.partition(" ")
        if part == "continues":
            block.continues = True
        elif word == "file" and re.fullmatch(r"[\w.-]+\.py", rest):
            block.file = rest
        elif word == "given" and rest:
            block.given = [n.strip() for n in rest.split(",")]
        elif word == "needs" and rest.split(":")[0].strip() in NEEDS:
            kind, _, reason = rest.partition(":")
            block.needs, block.reason = kind.strip(), reason.strip()
            assert block.reason, f"{where}: `needs {block.needs}` says why: `needs x: reason`"
        elif word == "env" and re.fullmatch(r"\w+=\S*", rest):
            key, _, value = rest.partition("=")
            block.env[key] = value
        elif word == "here" and rest:
            call = ast.parse(f"f({rest})", mode="eval").body
            block.here = {k.arg: ast.unparse(k.value) for k in call.keywords}
        else:
            raise AssertionError(f"{where}: unknown docs-test marker part {part!r}")


def python_blocks(path: Path) -> list[Block]:
    """The fenced python blocks of one page, with their markers."""
    lines = path.read_text().splitlines()
    doc = str(path.relative_to(ROOT))
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or not m.group(2):
            if m:  # an unlabelled fence opens a block too: skip to its end
                i += 1
                while i < len(lines) and not FENCE.match(lines[i]):
                    i += 1
            i += 1
            continue
        indent, lang, start = m.group(1), m.group(2), i
        i += 1
        while not lines[i].startswith(f"{indent}```"):
            i += 1
        if lang == "python":
            code = "\n".join(x[len(indent):] for x in lines[start + 1:i]) + "\n"
            block = Block(doc, start + 2, code)
            before = next((x for x in reversed(lines[:start]) if x.strip()), "")
            if mm := MARKER.match(before):
                block.marker = mm.group(1)
                parse_marker(block, block.marker)
            blocks.append(block)
        i += 1
    return blocks


ALL = {str(p.relative_to(ROOT)): python_blocks(p) for p in DOCS}
WITH_BLOCKS = [doc for doc, blocks in ALL.items() if blocks]


def test_every_block_is_run_or_says_why_not():
    for doc, blocks in ALL.items():
        for b in blocks:
            ast.parse(b.code, f"{doc}:{b.line}")  # each one on its own: no half statements
            if b.mode == "check":
                assert b.reason, (doc, b.line)
            assert not (b.continues and b.line == blocks[0].line), \
                f"{doc}:{b.line}: the first block continues nothing"
    counts = summary()
    assert counts["run"] + counts["file"] + counts["check"] == sum(map(len, ALL.values()))
    assert counts["run"] + counts["file"] > 2 * counts["check"], counts  # most blocks run


def summary() -> dict[str, int]:
    counts = {"run": 0, "file": 0, "check": 0}
    for blocks in ALL.values():
        for b in blocks:
            counts[b.mode] += 1
    return counts


@pytest.mark.parametrize("doc", WITH_BLOCKS)
def test_the_python_blocks_of_each_page_run(doc, tmp_path):
    blocks = ALL[doc]
    slurm = any(b.needs == "slurm" and b.here for b in blocks)
    here_slurm = slurm and slurm_available()
    payload = [{"doc": b.doc, "line": b.line, "code": b.code, "continues": b.continues,
                "given": b.given, "env": b.env, "here": b.here if b.mode == "run" else {},
                "mode": "check" if b.needs == "slurm" and not here_slurm else b.mode,
                "mode_arg": b.file} for b in blocks]
    (tmp_path / "blocks.json").write_text(json.dumps(payload))
    proc = subprocess.run([PYTHON, str(RUNNER), str(tmp_path / "blocks.json")], cwd=tmp_path,
                          env=child_env(), capture_output=True, text=True, timeout=900)
    done = re.findall(r"^docs-test: (\w+) (\S+):(\d+)", proc.stdout, re.MULTILINE)
    assert proc.returncode == 0, (
        f"{doc}: block {len(done) + 1} of {len(blocks)} (line {blocks[len(done)].line}) "
        f"failed:\n{proc.stderr[-6000:]}\n--- stdout ---\n{proc.stdout[-3000:]}")
    assert [(m, int(line)) for m, _, line in done] == [(p["mode"], p["line"]) for p in payload]
    for ledger in tmp_path.glob("*.json"):  # the campaigns the page ran: none of them failed
        head = json.loads(ledger.read_text())
        if isinstance(head, dict) and head.get("format") == "diffsoup-campaign-ledger":
            tasks = read_ledger(ledger)["tasks"]  # with what is recorded beside the file
            failed = {t: r["error"] for t, r in tasks.items() if r["status"] != "accepted"}
            assert not failed, f"{doc}: tasks of {ledger.name} not accepted: {failed}"
    if slurm:
        require(here_slurm, f"{doc}'s Slurm blocks were only compiled: no Slurm answers "
                            "(start one with scripts/slurm-start.sh)")


@pytest.mark.parametrize("code, message", [
    ("from campaign import checkpointed_map, checkpointed_mapp\n",
     "line 10: campaign.checkpointed_mapp: campaign has no 'checkpointed_mapp'"),
    ("import schedulers\nschedulers.slurm.JobWatcherr\n", "line 11: schedulers.slurm.JobWatcherr"),
    ("from campaign import checkpointed_map\ncheckpointed_map(fit, items, ledger_path='f.json',"
     " execution='slurm', partiton='gpu')\n",
     "line 11: checkpointed_map takes no keyword ['partiton']"),
])
def test_a_block_that_is_only_compiled_still_fails_on_a_name_we_lack(tmp_path, code, message):
    payload = [{"doc": "docs/x.md", "line": 10, "code": code, "continues": False, "given": [],
                "env": {}, "here": {}, "mode": "check", "mode_arg": ""}]
    (tmp_path / "blocks.json").write_text(json.dumps(payload))
    proc = subprocess.run([PYTHON, str(RUNNER), str(tmp_path / "blocks.json")], cwd=tmp_path,
                          env=child_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and f"docs/x.md, {message}" in proc.stderr, proc.stderr


if __name__ == "__main__":  # the counts per page: python tests/test_docs_blocks.py
    for doc, blocks in ALL.items():
        if blocks:
            modes = {m: sum(b.mode == m for b in blocks) for m in ("run", "file", "check")}
            print(f"{doc}: {len(blocks)} blocks: {modes}")
            for b in blocks:
                if b.mode == "check" or b.here:
                    print(f"  line {b.line}: {b.mode}, needs {b.needs}: {b.reason}"
                          + (f" (here {b.here})" if b.here else ""))
    print(summary())
