"""``chunkproof repro --style vllm``: the short test a vLLM pull request would add, calling the
installed vLLM's own ``Scheduler`` methods on a stub ``self``.

vLLM itself (torch and all) is not installed here, so each generated file runs in a fresh
interpreter whose import path holds a ``vllm`` package that stands for one: its
``vllm.v1.core.sched.scheduler.Scheduler`` is a class written in the test (the mechanics), or a
release's real ``Scheduler`` compiled from its source by chunkproof's reader (what importing
that vLLM would give the test). Nothing else decides whether the file passes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import Cli
from repro_helpers import run_repro
from vllm_copies import patched_release

from chunkproof.checker.kinds import load_counterexample
from chunkproof.model.counterexample import Counterexample
from chunkproof.source.releases import release_root

COUNTEREXAMPLES = Path(__file__).resolve().parent.parent / "counterexamples"
SMALLEST = COUNTEREXAMPLES / "vllm-0.33" / "p1-livelock-smallest.json"
"""0.33's livelock at T=5, B=4, L=2, M=2: stuck at c=3 (the split gives 1, the reservation 0)."""
SHORT_FORM = sorted(
    path
    for path in COUNTEREXAMPLES.glob("*/*.json")
    if isinstance(cx := load_counterexample(path), Counterexample)
    and not cx.config.items
    and cx.property not in ("P6", "P8")
)
"""The curated single-request counterexamples without encoder items, of a property other than
P6 and P8: those the short form serves."""


def installed(scheduler_module: str, into: Path) -> Path:
    """A folder to put first on the import path, holding a ``vllm`` package whose
    ``vllm/v1/core/sched/scheduler.py`` is ``scheduler_module``."""
    package = into / "vllm" / "v1" / "core" / "sched"
    package.mkdir(parents=True)
    for folder in (package, *package.parents):
        if folder == into:
            break
        (folder / "__init__.py").touch()
    (package / "scheduler.py").write_text(scheduler_module)
    return into


def installed_release(root: Path, into: Path) -> Path:
    """:func:`installed` with the ``Scheduler`` of the source tree at ``root``: its real
    methods, compiled from the text by chunkproof's reader."""
    module = (
        "from pathlib import Path\n\n"
        "from chunkproof.source.extraction import DirectoryTree, extract\n\n"
        f"Scheduler = extract(DirectoryTree(Path({str(root)!r}))).scheduler_type\n"
    )
    return installed(module, into)


HAND_WRITTEN = '''
class Scheduler:
    """0.33's split and reservation for one request, written out (the stuck point of
    p1-livelock-smallest: at c=3 the split gives 1, the reservation 0)."""

    @property
    def grid(self):
        return self.cache_config.block_size

    def _mamba_block_aligned_split(self, request, num_new_tokens, local=0, external=0):
        c = request.num_computed_tokens + local + external
        aligned = (c + num_new_tokens) // self.grid * self.grid
        return aligned - c if aligned > c else num_new_tokens

    def _reserve_prefill_lookahead(self, request, num_computed_tokens, num_new_tokens):
        gap = request.num_tokens - num_computed_tokens - num_new_tokens
        if 0 < gap < self.num_prefill_lookahead:
            return max(num_new_tokens - (self.num_prefill_lookahead - gap), 0)
        return num_new_tokens
'''
"""A ``Scheduler`` with 0.33's livelock: a helper property, a method reading the stub."""

FIXED = HAND_WRITTEN.replace(
    "            return max(num_new_tokens - (self.num_prefill_lookahead - gap), 0)",
    "            return num_new_tokens",
)
"""The same with a reservation that never cuts the chunk."""


def generate(cli: Cli, cx_file: Path, tmp_path: Path) -> Path:
    """``chunkproof repro --style vllm`` of ``cx_file`` into ``tmp_path/repro``."""
    out = tmp_path / "repro" / f"test_{cx_file.stem.replace('-', '_')}.py"
    result = cli("repro", str(cx_file), "--style", "vllm", "--pytest", str(out))
    assert result.code == 0 and "where vLLM is installed" in result.out, result
    return out


def test_the_short_form_calls_the_installed_scheduler(cli: Cli, tmp_path: Path) -> None:
    """The file imports vLLM's Scheduler, carries no source loader, and is a fraction of the
    standalone form's length (the loader is most of the latter)."""
    short = generate(cli, SMALLEST, tmp_path).read_text()
    standalone = tmp_path / "standalone.py"
    assert cli("repro", str(SMALLEST), "--pytest", str(standalone)).code == 0
    assert "from vllm.v1.core.sched.scheduler import Scheduler\n" in short
    assert "source loader" not in short and "CHUNKPROOF_VLLM_SOURCE" not in short
    assert len(short.splitlines()) * 2 < len(standalone.read_text().splitlines())


def test_it_fails_on_the_bug_and_passes_on_the_fix(cli: Cli, tmp_path: Path) -> None:
    """Against a Scheduler with the livelock the test fails naming P1 at c=3; against the
    same class with the reservation fixed it passes."""
    test_file = generate(cli, SMALLEST, tmp_path)
    status, output = run_repro(test_file, None, installed(HAND_WRITTEN, tmp_path / "bug"))
    assert status == 1 and "AssertionError: P1: stuck at c=3 < E=5" in output, output
    status, output = run_repro(test_file, None, installed(FIXED, tmp_path / "fix"))
    assert status == 0 and "1 passed" in output, output


def test_an_attribute_the_stub_lacks_is_an_error_not_p0(cli: Cli, tmp_path: Path) -> None:
    """A method reading ``self.x`` that neither the stub nor Scheduler has stops the test with
    that name (the stub is incomplete), rather than passing for a crash of vLLM's code."""
    reads_more = HAND_WRITTEN.replace(
        "        c = request.num_computed_tokens",
        "        assert self.brand_new_setting\n        c = request.num_computed_tokens",
    )
    test_file = generate(cli, SMALLEST, tmp_path)
    status, output = run_repro(test_file, None, installed(reads_more, tmp_path / "more"))
    assert status == 1, output
    assert "SourceError: the code reads self.brand_new_setting" in output, output
    assert "AssertionError: P0" not in output, output


def test_without_vllm_the_file_errors(cli: Cli, tmp_path: Path) -> None:
    """Where vLLM cannot be imported the file errors at collection; it never passes."""
    test_file = generate(cli, SMALLEST, tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    status, output = run_repro(test_file, None, empty)
    assert status not in (0, 5) and "ModuleNotFoundError: No module named 'vllm'" in output


@pytest.mark.parametrize(
    ("cx_file", "words"),
    [
        (COUNTEREXAMPLES / "vllm-0.33" / "system-hol-split-zero.json", "multi-request"),
        (COUNTEREXAMPLES / "vllm-0.27" / "p1-encoder-two-items.json", "encoder items"),
        (COUNTEREXAMPLES / "vllm-0.28" / "p6-lost-resend-state.json", "KV cache lookup"),
        (COUNTEREXAMPLES / "lookahead-in-split" / "p6-fix-skips-resend.json", "KV cache lookup"),
    ],
)
def test_the_forms_the_short_style_does_not_serve(
    cli: Cli, tmp_path: Path, cx_file: Path, words: str
) -> None:
    """A multi-request file, a request with encoder items and a P6 counterexample (judged at
    the tree's own KV cache lookup, which the short form cannot run): one line naming the
    reason and the standalone form, exit 2, no file."""
    out = tmp_path / "test_x.py"
    result = cli("repro", str(cx_file), "--style", "vllm", "--pytest", str(out))
    assert result.code == 2 and not out.exists()
    assert words in result.err and "--style standalone" in result.err
    assert len(result.err.strip().splitlines()) == 1


def test_an_unknown_style_is_refused(cli: Cli, tmp_path: Path) -> None:
    result = cli("repro", str(SMALLEST), "--style", "short", "--pytest", str(tmp_path / "t.py"))
    assert result.code == 2 and "--style" in result.err


def _source_of(cx: Counterexample, tmp_path: Path) -> Path:
    """The source tree a curated counterexample was found on: its release, or the fix."""
    if cx.policy == "lookahead-in-split":
        return patched_release(tmp_path / "fixed")
    return release_root(cx.policy.removeprefix("vllm-") + ".0")


@pytest.mark.fidelity
@pytest.mark.parametrize("cx_file", SHORT_FORM, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_short_repro_fails_on_the_release_it_was_found_on(
    cli: Cli, tmp_path: Path, cx_file: Path
) -> None:
    """Each curated counterexample the short form serves breaks its property when the test
    imports the real Scheduler of its release (or of the fix written into 0.33.0)."""
    cx = load_counterexample(cx_file)
    assert isinstance(cx, Counterexample)
    test_file = generate(cli, cx_file, tmp_path)
    vllm = installed_release(_source_of(cx, tmp_path), tmp_path / "installed")
    status, output = run_repro(test_file, None, vllm)
    assert status == 1 and f"AssertionError: {cx.property}: " in output, output


@pytest.mark.fidelity
def test_the_short_livelock_repro_passes_on_the_fix(cli: Cli, tmp_path: Path) -> None:
    """0.33's smallest livelock finishes on the lookahead-in-split tree's real Scheduler."""
    test_file = generate(cli, SMALLEST, tmp_path)
    vllm = installed_release(patched_release(tmp_path / "fixed"), tmp_path / "installed")
    status, output = run_repro(test_file, None, vllm)
    assert status == 0 and "1 passed" in output, output
