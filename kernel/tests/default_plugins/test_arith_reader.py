import tracemalloc

import pytest

from astuner.components import build_reader
from astuner.config import load_config
from astuner.default_plugins.arith_reader import ArithReader, ArithReaderSettings
from astuner.errors import ConfigError
from astuner.testing.cli import run_astuner


def _evaluate(expression: str) -> int:
    # expressions only hold integers, + - * / and parentheses; division is exact
    return int(eval(expression.replace("/", "//"), {"__builtins__": {}}))


def test_same_seed_same_tasks_and_answers_are_right() -> None:
    settings = ArithReaderSettings(seed=3, difficulty="hard", train_size=50, validation_size=20)
    first = list(ArithReader(settings).read("train"))
    again = list(ArithReader(settings).read("train"))
    assert first == again
    assert len(first) == 50
    for task in first:
        assert int(task.answer) == _evaluate(task.metadata["expression"])
        assert int(task.answer) >= 0
        assert task.main_query.endswith("have now?")


def test_other_seed_other_tasks() -> None:
    a = list(ArithReader(ArithReaderSettings(seed=1, train_size=20)).read("train"))
    b = list(ArithReader(ArithReaderSettings(seed=2, train_size=20)).read("train"))
    assert [t.main_query for t in a] != [t.main_query for t in b]


def test_validation_never_repeats_a_train_problem() -> None:
    settings = ArithReaderSettings(difficulty="easy", train_size=300, validation_size=100)
    reader = ArithReader(settings)
    train = {t.main_query for t in reader.read("train")}
    validation = [t.main_query for t in reader.read("validation")]
    assert len(validation) == 100
    assert not train & set(validation)
    assert len(set(validation)) == len(validation)


def test_difficulty_changes_the_number_of_steps() -> None:
    def steps(difficulty: str) -> list[int]:
        reader = ArithReader(ArithReaderSettings(difficulty=difficulty, train_size=100))
        return [t.main_query.count("Then") for t in reader.read("train")]

    assert set(steps("easy")) == {1}
    assert min(steps("hard")) >= 2
    assert max(steps("hard")) <= 3


def test_product_problems_multiply_a_three_digit_by_a_two_digit_number() -> None:
    settings = ArithReaderSettings(seed=5, difficulty="product", train_size=200, validation_size=50)
    tasks = list(ArithReader(settings).read("train"))
    assert tasks == list(ArithReader(settings).read("train"))  # deterministic
    assert len(tasks) == 200
    for task in tasks:
        a, b = (int(n) for n in task.metadata["expression"].split(" * "))
        assert 100 <= a <= 999 and 10 <= b <= 99
        assert task.main_query == f"What is {a} times {b}?"
        assert task.answer == str(a * b) == str(_evaluate(task.metadata["expression"]))
    assert len({t.main_query for t in tasks}) > 190  # 81,000 possible problems: few repeats


def test_product_validation_never_repeats_a_train_problem() -> None:
    settings = ArithReaderSettings(difficulty="product", train_size=2000, validation_size=64)
    reader = ArithReader(settings)
    train = {t.main_query for t in reader.read("train")}
    validation = [t.main_query for t in reader.read("validation")]
    assert len(validation) == 64 == len(set(validation))
    assert not train & set(validation)
    assert validation == [t.main_query for t in reader.read("validation")]


def test_an_impossible_size_is_a_config_error_naming_the_key(plugins) -> None:
    for key, size, limit in (("train_size", 1_000_000_000, "100,000"), ("validation_size", 20_000, "10,000")):
        config = load_config(None, [f"task_reader.arith.{key}={size}"], environ={})
        with pytest.raises(ConfigError) as err:
            build_reader(config, plugins)
        message = str(err.value)
        origin = f"the command line (-o task_reader.arith.{key}=...)"
        assert message.startswith(f"Invalid value for 'task_reader.arith.{key}' in {origin}")
        assert f"at most {limit} tasks" in message and f"(got {size})" in message


def test_data_preview_of_a_billion_train_tasks_fails_at_once_in_one_paragraph(write_config) -> None:
    path = write_config({"task_reader": {"type": "arith", "arith": {"train_size": 1_000_000_000}}})
    result = run_astuner(
        "data", "preview", "--conf", str(path), "--split", "validation", cwd=path.parent, timeout=60
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert f"'task_reader.arith.train_size' in config file '{path}' (line 5)" in result.stderr
    assert "raise trainer_common.total_epochs instead" in result.stderr


def test_the_train_split_streams_without_remembering_its_problems() -> None:
    reader = ArithReader(ArithReaderSettings(difficulty="hard", train_size=10_000))
    tracemalloc.start()
    try:
        count = sum(1 for _ in reader.read("train"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 10_000
    assert peak < 500_000  # 10,000 remembered stories alone take about 2 MB


def test_the_largest_sizes_still_make_both_splits() -> None:
    # easy is the smallest problem set: its largest train split still leaves room for validation
    settings = ArithReaderSettings(difficulty="easy", train_size=100_000, validation_size=10_000)
    reader = ArithReader(settings)
    validation = [t.main_query for t in reader.read("validation")]
    assert len(validation) == len(set(validation)) == 10_000
    assert not set(validation) & {t.main_query for t in reader.read("train")}
