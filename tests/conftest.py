"""The suite's switches and shared fixtures.

Slow sweeps (marked ``slow``) are skipped unless selected: ``pytest --runslow`` runs
everything, ``pytest -m slow`` only the slow sweeps; plain ``pytest`` runs the rest.
Fixtures: ``cli`` (a command run in process), ``compare_cli`` (``experiments.compare``
in process), ``fake_solvers`` and ``two_layer_file`` (for compare's tests), ``compare_two`` (compare
with those solvers on that file), and
``ray_instance`` (a local Ray instance for a test module)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import compare_fakes
from tests.commands import CommandRun, RunCommand, RunCompare, RunFakes, call_entry_point


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False,
                     help="also run the slow sweeps (tests marked slow; -m slow runs only those)")


def slow_selected(config: pytest.Config) -> bool:
    """Whether the tests marked ``slow`` run: with --runslow, or when -m names the marker."""
    return bool(config.getoption("--runslow")) or "slow" in (config.getoption("markexpr") or "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if slow_selected(config):
        return
    skip = pytest.mark.skip(reason="slow sweep: run with --runslow or -m slow")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)


# ---------------------------------------------------------------------------------
# commands in process
# ---------------------------------------------------------------------------------


@pytest.fixture()
def cli(capfd: pytest.CaptureFixture[str]) -> RunCommand:
    """``cli("piper", "solve", FILE, ...)``: ``python -m piper solve FILE ...`` run in this
    process (tests/commands.py names the commands), with what it wrote to file descriptors
    1 and 2 (``solve`` points descriptor 1 at 2 while a solver runs)."""

    def run(command: str, *argv: str) -> CommandRun:
        capfd.readouterr()  # what came before is not the command's
        code = call_entry_point(command, argv)
        out, err = capfd.readouterr()
        return CommandRun(code, out, err)

    return run


@pytest.fixture()
def compare_cli(cli: RunCommand) -> RunCompare:
    """``compare_cli(ARGS)``: ``python -m experiments.compare ARGS --no-plots`` in process."""
    return lambda args: cli("experiments.compare", *args, "--no-plots")


@pytest.fixture()
def fake_solvers() -> Iterator[None]:
    """The fake solvers of tests/compare_fakes.py registered for the test, and two more:
    one whose module does not import and one limited to one layer."""
    from piper.solvers.registry import SolverInfo, register, unregister

    module = compare_fakes.__name__
    for name, (func, exact) in compare_fakes.FAKES.items():
        register(SolverInfo(name, f"{module}:{func}", exact, f"test fake {func}"))
    register(SolverInfo("fake-missing", "tests.no_such_module:solve", True, "module does not import"))
    register(SolverInfo("fake-tiny-only", f"{module}:solve_good", True, "max 1 layer", max_nodes=1))
    try:
        yield
    finally:
        for name in [*compare_fakes.FAKES, "fake-missing", "fake-tiny-only"]:
            unregister(name)


@pytest.fixture()
def two_layer_file(tmp_path: Path) -> Path:
    """tests/compare_fakes.py's two-layer instance as a workload file."""
    from piper.io.workload import dump_problem

    path = tmp_path / "two.json"
    dump_problem(compare_fakes.two_layer_problem(), path)
    return path


@pytest.fixture()
def compare_two(fake_solvers: None, two_layer_file: Path, tmp_path: Path, compare_cli: RunCompare) -> RunFakes:
    """``compare_two(SOLVERS, *FLAGS)``: ``experiments.compare`` on ``two_layer_file`` with the
    fake solvers SOLVERS (comma-separated) and FLAGS, its report in ``tmp_path / "out"``:
    (exit status, stdout, stderr, that folder)."""
    out = tmp_path / "out"

    def run(solvers: str, *flags: str) -> tuple[int, str, str, Path]:
        code, stdout, err = compare_cli([str(two_layer_file), "--solvers", solvers, "--out", str(out), *flags])
        return code, stdout, err, out

    return run


# ---------------------------------------------------------------------------------
# Ray
# ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_instance() -> Iterator[None]:
    """A local Ray instance (2 CPUs) for the test module; without Ray the test skips."""
    ray = pytest.importorskip("ray")
    from piper.solvers.execution import init_ray

    init_ray(None, num_cpus=2)
    try:
        yield
    finally:
        ray.shutdown()
