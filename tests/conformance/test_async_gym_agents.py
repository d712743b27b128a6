"""
async-gym-agents' own scripts run on lit_sb3 with only their imports changed and their budgets cut
(:mod:`conformance.async_gym_agents`, :mod:`conformance.agym_runner`), each in a subprocess.

They are in none of its sdists, so they come from its repository (a checkout, or GitHub): all three run with
``-m conformance`` (``test.py`` and ``truncating.py`` train on LunarLander: ``pip install box2d``). The default run
checks the harness itself on a script of ours of the same shape.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from conformance.agym_runner import LEARN_STEPS, ON_POLICY_STEPS, SLEEP_SCALE
from conformance.async_gym_agents import SCRIPTS, fixtures_root, script_path, with_lit_sb3_imports

TESTS_FOLDER = pathlib.Path(__file__).resolve().parents[1]
#: Seconds a script may take (a guard against hangs).
SCRIPT_TIMEOUT = 900
#: What each script prints when it ran to its end.
FINAL_LINES = {
    "test.py": ("Done",),
    "compare.py": ("Buffer utilization:", "Buffer emptiness:", "Async:", "Parallel:", "Sequential:"),
    "truncating.py": ("Truncated episodes:", "Mean reward:"),
}


def run_script(script: pathlib.Path) -> subprocess.CompletedProcess[str]:
    """
    :param script: A script whose imports were changed, in the folder it runs in.
    :return: Its run through :mod:`conformance.agym_runner`.
    """
    python_path = [str(TESTS_FOLDER.parent), str(TESTS_FOLDER), str(fixtures_root()), os.environ.get("PYTHONPATH")]
    return subprocess.run(
        [sys.executable, "-m", "conformance.agym_runner", str(script)],
        cwd=script.parent,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, python_path))},
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT,
        check=False,
    )


@pytest.mark.conformance
@pytest.mark.timeout(SCRIPT_TIMEOUT + 120)
@pytest.mark.parametrize("name", list(SCRIPTS))
def test_async_gym_agents_script_runs_on_lit_sb3(name: str, tmp_path: pathlib.Path) -> None:
    script = tmp_path / name
    script.write_text(with_lit_sb3_imports(script_path(name).read_text()))
    completed = run_script(script)
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, f"{name} failed (exit {completed.returncode}):\n{output[-4000:]}"
    missing = [line for line in FINAL_LINES[name] if line not in completed.stdout]
    assert not missing, f"{name} ended without printing {missing}:\n{output[-4000:]}"


OUR_SCRIPT = """
from stable_baselines3 import PPO

import lit_sb3
from async_gym_agents.agents.async_agent import get_injected_agent
from async_gym_agents.envs.multi_env import IndexableMultiEnv
from async_gym_agents.envs.slow_cartpole import SlowCartPoleEnv

if __name__ == "__main__":
    assert get_injected_agent is lit_sb3.get_injected_agent and IndexableMultiEnv is lit_sb3.IndexableMultiEnv
    env = IndexableMultiEnv([lambda: SlowCartPoleEnv() for _ in range(2)])
    model = get_injected_agent(PPO)("MlpPolicy", env)
    model.learn(total_timesteps=1_000_000)
    model.shutdown()
    print("learned", model.num_timesteps, model.n_steps, *env.get_attr("max_sleep"))
"""


def test_the_harness_changes_the_imports_and_cuts_the_budgets(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "ours.py"
    script.write_text(with_lit_sb3_imports(OUR_SCRIPT))
    completed = run_script(script)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-4000:]
    learned = next(line for line in completed.stdout.splitlines() if line.startswith("learned")).split()
    steps, n_steps, sleeps = int(learned[1]), int(learned[2]), [float(value) for value in learned[3:]]
    assert LEARN_STEPS <= steps < 2 * LEARN_STEPS  # learn(1_000_000) cut; whole episodes may take it a little beyond
    assert n_steps == ON_POLICY_STEPS  # PPO's default 2048 cut
    assert sleeps == [0.1 * SLEEP_SCALE] * 2  # the fixture environments' sleeps cut


def test_a_script_that_imports_nothing_lit_sb3_replaces_is_refused() -> None:
    with pytest.raises(ValueError, match="imports neither"):
        with_lit_sb3_imports("from async_gym_agents.envs.slow_cartpole import SlowCartPoleEnv\n")
