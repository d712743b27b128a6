"""Property-based input tests: AsyncEval's ``send_jobs``/``seed``/``set_options`` with arbitrary arrays, values and
orders of calls, the CLI's hyper-parameter files with arbitrary YAML, saved models loaded for other spaces. A bad
input is a clear error naming the argument, raised before any work; nothing is left pending or behind.

Each test builds one AsyncEval and runs its examples on it (building a pool per example would take minutes)."""

from __future__ import annotations

import argparse
import pathlib
import re
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
import yaml
from gymnasium import spaces
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from sb3_contrib.ars.policies import LinearPolicy

from fixture_envs import ScalarEnv, scalar_vec_env
from lit_sb3 import ARS, AsyncEval
from lit_sb3.cli import build_parser
from lit_sb3.cli.common import CliError
from lit_sb3.cli.hyperparams import Hyperparams, algorithm_arguments, load_hyperparams
from lit_sb3.cli.train import _population_training
from lit_sb3.workers import shared_array

#: Few examples per property: the default run must stay short (each example is a round or a model at most).
FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
N_PARAMS = 2  # LinearPolicy on ScalarEnv: one action from two observations, no bias


@pytest.fixture
def shared_memory_names(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the shared-memory segments created while the test runs."""
    names: list[str] = []
    original = shared_array.SharedArray.__init__

    def recording(self: shared_array.SharedArray, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        names.append(self.handle.name)

    monkeypatch.setattr(shared_array.SharedArray, "__init__", recording)
    return names


@pytest.fixture
def async_eval(shared_memory_names: list[str]) -> Iterator[AsyncEval]:
    env = ScalarEnv()
    with AsyncEval([scalar_vec_env] * 2, LinearPolicy(env.observation_space, env.action_space)) as evaluator:
        yield evaluator
    left = [name for name in shared_memory_names if pathlib.Path("/dev/shm", name).exists()]
    assert shared_memory_names and not left, f"shared memory left behind: {left}"


def check_refusal(error: BaseException, *names: str) -> None:
    """A refusal is a TypeError or ValueError whose message names the argument."""
    assert isinstance(error, TypeError | ValueError), repr(error)
    assert any(name in str(error) for name in names), f"{error!r} names none of {names}"


def check_round(evaluator: AsyncEval, pop_size: int) -> None:
    results = evaluator.get_results()
    assert [index for index, _ in results] == list(range(pop_size))
    assert all(np.isfinite(returns).all() and (lengths == 20).all() for _, (returns, lengths) in results)


# ------------------------------------------------------------------------------------------------------ send_jobs

DTYPES = st.sampled_from(
    [np.float16, np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8, np.bool_, np.complex64, ">f4"]
)
SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)
ELEMENTS = st.floats(allow_nan=True, allow_infinity=True, width=64) | st.sampled_from([0.0, 1e39, -1e39, 1e300])


@st.composite
def weight_arrays(draw: st.DrawFn) -> Any:
    dtype = np.dtype(draw(DTYPES))
    shape = draw(st.one_of(SHAPES, st.tuples(st.integers(0, 9), st.just(N_PARAMS))))
    if dtype.kind in "fc":
        array = draw(hnp.arrays(dtype, shape, elements=ELEMENTS.map(lambda x: np.asarray(x).astype(dtype).item())))
    else:
        array = draw(hnp.arrays(dtype, shape))
    if draw(st.booleans()) and array.ndim == 2:
        array = np.asfortranarray(array)
    as_tensor = draw(st.sampled_from([None, None, th.float32, th.float64, th.bfloat16, th.float16, th.int32]))
    if as_tensor is not None and dtype.kind in "fiub" and dtype.isnative:
        return th.as_tensor(array.astype(np.float64)).to(as_tensor)
    return array


POP_SIZES = st.integers(-2, 10) | st.sampled_from([2.0, None, True, np.int64(3), "2", 2**70])


@FEW
@given(weights=weight_arrays(), pop_size=POP_SIZES)
def check_send_jobs(async_eval: AsyncEval, weights: Any, pop_size: Any) -> None:
    try:
        async_eval.send_jobs(weights, pop_size)
    except Exception as error:
        check_refusal(error, "candidate_weights", "pop_size")
        assert not async_eval._round_pending  # refused before any work
        return
    check_round(async_eval, int(pop_size))


def test_send_jobs_takes_any_array_or_refuses_it_by_name(async_eval: AsyncEval) -> None:
    check_send_jobs(async_eval)


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        (np.full((2, N_PARAMS), 1e39), r"NaN or inf values in candidates \[0, 1\] \(as float32\)"),
        (np.ones((2, N_PARAMS), np.complex64), "candidate_weights must be real"),
        (th.ones(2, N_PARAMS, dtype=th.complex64), "candidate_weights must be real"),
    ],
)
def test_weights_that_float32_cannot_hold_are_refused(async_eval: AsyncEval, weights: Any, message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        async_eval.send_jobs(weights, 2)


def test_bfloat16_tensors_are_evaluated_as_float32(async_eval: AsyncEval) -> None:
    async_eval.seed(0)
    async_eval.send_jobs(th.full((3, N_PARAMS), 0.5, dtype=th.bfloat16), 3)
    from_bfloat16 = async_eval.get_results()
    async_eval.seed(0)
    async_eval.send_jobs(np.full((3, N_PARAMS), 0.5, np.float32), 3)
    assert repr(async_eval.get_results()) == repr(from_bfloat16)


# ------------------------------------------------------------------------------------------- seed and set_options

SEEDS = st.integers(-(2**70), 2**70) | st.sampled_from([None, 1.5, True, "3", np.int64(4), np.uint64(2**63), [1]])


@FEW
@given(seed=SEEDS, run=st.booleans())
def check_seed(async_eval: AsyncEval, seed: Any, run: bool) -> None:
    try:
        seeds = async_eval.seed(seed)
    except Exception as error:
        check_refusal(error, "seed")
        return
    assert seeds == [None if seed is None else int(seed)] * async_eval.n_workers
    if run:
        async_eval.send_jobs(np.ones((2, N_PARAMS), np.float32), 2)
        check_round(async_eval, 2)


def test_seed_takes_any_non_negative_int_or_refuses_by_name(async_eval: AsyncEval) -> None:
    check_seed(async_eval)


def test_rounds_after_any_seed_repeat_exactly(async_eval: AsyncEval) -> None:
    @FEW
    @given(seed=st.integers(0, 2**70))
    def repeats(seed: int) -> None:
        outcomes = []
        for _ in range(2):
            async_eval.seed(seed)
            async_eval.send_jobs(np.full((2, N_PARAMS), 0.3, np.float32), 2)
            outcomes.append(repr(async_eval.get_results()))
        assert outcomes[0] == outcomes[1]

    repeats()


OPTION_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5) | hnp.arrays(np.float64, 3),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3),
    max_leaves=8,
)
#: Option keys of no meaning to ScalarEnv (its "start" would make the environment itself fail, in the worker).
OPTION_DICTS = st.dictionaries(st.text(max_size=6).filter(lambda key: key != "start"), OPTION_VALUES, max_size=4)
UNPICKLABLE = st.builds(lambda: {"lock": threading.Lock()})
OPTIONS = (
    st.none()
    | OPTION_DICTS
    | st.lists(OPTION_DICTS, min_size=0, max_size=4)
    | UNPICKLABLE
    | st.lists(UNPICKLABLE, min_size=2, max_size=2)
    | st.sampled_from([(), "level=1", 3, [{}, "x"], [None, None], {1: 2}])
)


@FEW
@given(options=OPTIONS)
def check_set_options(async_eval: AsyncEval, options: Any) -> None:
    try:
        async_eval.set_options(options)
    except Exception as error:
        check_refusal(error, "options")
        return
    async_eval.send_jobs(np.ones((2, N_PARAMS), np.float32), 2)
    check_round(async_eval, 2)


def test_set_options_takes_what_workers_can_receive_or_refuses_by_name(async_eval: AsyncEval) -> None:
    try:
        check_set_options(async_eval)
    finally:
        async_eval.set_options(None)


def test_options_that_cannot_reach_the_workers_are_refused_at_once(async_eval: AsyncEval) -> None:
    with pytest.raises(TypeError, match="options cannot be sent to the workers"):
        async_eval.set_options({"lock": threading.Lock()})
    async_eval.send_jobs(np.ones((2, N_PARAMS), np.float32), 2)  # the options in force are the earlier ones
    check_round(async_eval, 2)


# ------------------------------------------------------------------------------------------------ orders of calls

CALLS = st.sampled_from(["send_jobs", "get_results", "seed", "set_options", "get_obs_rms", "merge_obs_rms"])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=st.lists(CALLS, max_size=10))
def check_call_order(async_eval: AsyncEval, calls: list[str]) -> None:
    pending = False
    for call in calls:
        # What the calls are refused for: get_results with nothing sent, a second send before get_results, the
        # statistics while a round runs, merge_obs_rms without VecNormalize. seed and set_options always work.
        if call == "send_jobs":
            if pending:
                with pytest.raises(ValueError, match=r"send_jobs\(\) was called again before get_results"):
                    async_eval.send_jobs(np.ones((3, N_PARAMS), np.float32), 3)
            else:
                async_eval.send_jobs(np.ones((3, N_PARAMS), np.float32), 3)
                pending = True
        elif call == "get_results":
            if pending:
                check_round(async_eval, 3)
                pending = False
            else:
                with pytest.raises(ValueError, match="no round pending"):
                    async_eval.get_results()
        elif call == "seed":
            assert async_eval.seed(1) == [1, 1]
        elif call == "set_options":
            assert async_eval.set_options({"level": 1}) == [None, None]
        elif pending:
            with pytest.raises(ValueError, match=f"{call}.. was called while a round is pending"):
                getattr(async_eval, call)()
        elif call == "get_obs_rms":
            assert async_eval.get_obs_rms() == [None, None]
        else:
            with pytest.raises(ValueError, match="merge_obs_rms: some workers' environments have no VecNormalize"):
                async_eval.merge_obs_rms()
    if pending:
        check_round(async_eval, 3)


def test_any_order_of_calls_is_served_or_refused_clearly(async_eval: AsyncEval) -> None:
    check_call_order(async_eval)


# ----------------------------------------------------------------------------------------- hyper-parameter files

ARS_KEYS = [*algorithm_arguments(ARS), "n_envs", "n_timesteps", "policy", "normalize", "normalize_kwargs"]
YAML_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(
        [
            "lin_0.02",
            "lin_x",
            "dict(net_arch=[8])",
            "dict(",
            "{[1]: 2}",
            "nn.ReLU",
            "nn._private",
            "__import__('os')",
            "(" * 200,
            "dict(norm_obs=True)",
            "lin_inf",
            "lin_nan",
            "LinearPolicy",
            "MlpPolicy",
            "[1, 'episode']",
        ]
    )
)
YAML_VALUES = st.recursive(
    YAML_SCALARS,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=6,
)
ENTRIES = st.dictionaries(st.sampled_from(ARS_KEYS) | st.text(max_size=6), YAML_VALUES, max_size=4)
DOCUMENTS = st.one_of(
    ENTRIES.map(yaml.safe_dump),
    st.dictionaries(st.sampled_from(["CartPole-v1", "Pendulum-v1"]) | st.text(max_size=5), ENTRIES, max_size=2).map(
        yaml.safe_dump
    ),
    st.text(max_size=40),
    st.sampled_from(
        [
            "n_timesteps: .inf",
            "n_timesteps: .nan",
            "n_envs: 1e400",
            "n_delta: 2001-02-30",
            "CartPole-v1: 2001-02-30",
            "learning_rate: !!python/object:os.system {}",
            "n_delta: [" * 60,
            "a: &a [*a]",
            'policy_kwargs: "dict(net_arch=[8], activation_fn=nn.Tanh)"',
            'normalize: "dict(norm_obs=True, bogus=1)"',
            "normalize_kwargs: {clip_obs: -1}",
            "n_delta: 1e30",
            "n_top: 3\nn_delta: 2",
            "\xff\xfe",
        ]
    ),
)


def train_arguments(path: pathlib.Path) -> argparse.Namespace:
    return build_parser().parse_args(["train", "ars", "CartPole-v1", "--hyperparams", str(path), "--workers", "0"])


def test_any_hyperparameter_file_is_taken_or_refused_with_a_cli_error() -> None:
    @settings(max_examples=80, deadline=None)
    @given(document=DOCUMENTS)
    def taken_or_refused(document: str) -> None:
        with tempfile.TemporaryDirectory() as folder:
            path = pathlib.Path(folder, "hyperparams.yml")
            path.write_text(document, errors="surrogateescape")
            try:
                hyperparams = load_hyperparams(path, "CartPole-v1", ARS)
                assert isinstance(hyperparams, Hyperparams)
                training, total_timesteps = _population_training(train_arguments(path), "ars", path)  # builds the model
            except CliError as error:
                message = str(error)
                assert message and "\n" not in message.strip() and "Traceback" not in message
                return
            training.close()
            assert total_timesteps >= 1

    taken_or_refused()


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("n_timesteps: .inf", "n_timesteps must be a positive whole number, got inf"),
        ("n_timesteps: .nan", "n_timesteps must be a positive whole number, got nan"),
        ("n_delta: 2001-02-30", "bad YAML in .*day is out of range"),
        ("policy_kwargs: '{[1]: 2}'", r"policy_kwargs: cannot read '\{\[1\]: 2\}'"),
        (f"policy_kwargs: '{'(' * 300}1{')' * 300}'", "policy_kwargs: cannot read"),
        (f"policy_kwargs: '{'(' * 100}1{')' * 100}'", "policy_kwargs must be a mapping, got 1"),
        ("normalize: 'dict(norm_obs=True, bogus=1)'", "normalize: 'bogus' is not an argument of VecNormalize"),
        ("0: 0000-00-00", "bad YAML in .*year 0 is out of range"),
        ("? '\n\n'\n: 1", r"has no entry for CartPole-v1 \(it has '\\n'\)"),
        ("n_delta: " + "[" * 60 + "]" * 60, "bad hyper-parameters for ARS: n_delta must be an int"),
    ],
)
def test_values_that_broke_the_reader_are_refused_by_name(tmp_path: pathlib.Path, document: str, message: str) -> None:
    path = tmp_path / "hyperparams.yml"
    path.write_text(document)
    with pytest.raises(CliError, match=message):
        load_hyperparams(path, "CartPole-v1", ARS)
        _population_training(train_arguments(path), "ars", path)


# ------------------------------------------------------------------------------------ saved models, other spaces


class SpacesEnv(gym.Env):
    """An environment of given spaces (observations are zeros, episodes one step)."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        super().__init__()
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        return self.observation_space.sample(), 0.0, True, False, {}


BOXES = st.builds(
    lambda size, low: spaces.Box(low, 1.0, shape=(size,), dtype=np.float32),
    st.integers(1, 4),
    st.sampled_from([-1.0, 0.0]),
)
ACTION_SPACES = BOXES | st.builds(spaces.Discrete, st.integers(2, 5))


def test_a_saved_model_loads_for_its_spaces_and_refuses_others_by_name(tmp_path: pathlib.Path) -> None:
    saved_spaces = (
        spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32),
        spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32),
    )
    model = ARS(LinearPolicy, SpacesEnv(*saved_spaces), n_delta=2, seed=0)
    model.save(tmp_path / "model.zip")
    expected = model.predict(np.zeros(3, np.float32), deterministic=True)[0]

    @settings(max_examples=30, deadline=None)
    @given(observation_space=BOXES, action_space=ACTION_SPACES)
    def loads_or_refuses(observation_space: spaces.Box, action_space: spaces.Space) -> None:
        env = SpacesEnv(observation_space, action_space)
        try:
            loaded = ARS.load(tmp_path / "model.zip", env=env)
        except ValueError as error:
            assert re.search(r"(Observation|Action) spaces do not match", str(error)), error
            assert (observation_space, action_space) != saved_spaces
            return
        assert (observation_space, action_space) == saved_spaces
        np.testing.assert_array_equal(loaded.predict(np.zeros(3, np.float32), deterministic=True)[0], expected)

    loads_or_refuses()


def test_a_saved_model_refuses_an_async_eval_of_other_spaces(tmp_path: pathlib.Path) -> None:
    saved_spaces = (spaces.Box(-1.0, 1.0, (3,), np.float32), spaces.Box(-1.0, 1.0, (1,), np.float32))
    ARS(LinearPolicy, SpacesEnv(*saved_spaces)).save(tmp_path / "model.zip")
    loaded = ARS.load(tmp_path / "model.zip", env=SpacesEnv(*saved_spaces))
    env = ScalarEnv()
    other = AsyncEval([scalar_vec_env], LinearPolicy(env.observation_space, env.action_space))
    with other, pytest.raises(ValueError, match="async_eval was built for a policy with 2 parameters"):
        loaded.learn(100, async_eval=other)
