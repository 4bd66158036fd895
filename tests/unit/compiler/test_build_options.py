"""BuildOptions are checked once, when made; unset settings keep the defaults of before
($POLYTF_THREADS, all CPUs), read when used; given twice (options= and a keyword) is an error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from polytf.compiler.build_options import TARGET_NAMES, BuildOptions
from polytf.config import THREADS_ENVIRONMENT_VARIABLE
from polytf.errors import PolytfError


def test_defaults():
    options = BuildOptions()
    assert (options.fallback, options.threads, options.target, options.cache_dir, options.storage) == (True, None, "cpu", None, None)


def test_the_thread_count_defaults_to_the_environment_read_when_used(monkeypatch):
    options = BuildOptions()
    monkeypatch.setenv(THREADS_ENVIRONMENT_VARIABLE, "3")
    assert options.thread_count() == 3
    monkeypatch.delenv(THREADS_ENVIRONMENT_VARIABLE)
    assert options.thread_count() == len(os.sched_getaffinity(0))
    assert BuildOptions(threads=5).thread_count() == 5


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"threads": 0}, "threads must be a positive number of threads .*, not 0"),
        ({"threads": -2}, "not -2"),
        ({"threads": 2.5}, "not 2.5"),
        ({"threads": True}, "not True"),
        ({"target": "tpu"}, "unknown target 'tpu'; choose one of cpu, cuda"),
        ({"fallback": "no"}, "fallback must be True or False, not 'no'"),
        ({"cache_dir": 5}, "cache directory must be a directory name, not 5"),
        ({"storage": 5}, "storage must be a URL"),
    ],
)
def test_a_bad_setting_is_a_polytf_error_naming_it(settings, message):
    with pytest.raises(PolytfError, match=message):
        BuildOptions(**settings)


def test_integral_thread_counts_are_plain_ints():
    numpy = pytest.importorskip("numpy")
    options = BuildOptions(threads=numpy.int64(4))
    assert options.threads == 4 and type(options.threads) is int


def test_every_target_name_has_a_backend(monkeypatch):
    from polytf.compiler.backends import select_backend

    monkeypatch.setenv("POLYTF_CUDA_EMULATION", "1")  # the CUDA backend without a GPU
    assert [select_backend(name).name for name in TARGET_NAMES] == list(TARGET_NAMES)


def test_of_takes_keyword_settings_or_an_options_object_alone():
    options = BuildOptions.of(threads=2, cache_dir=Path("cache"), storage="")
    assert options == BuildOptions(threads=2, cache_dir=Path("cache"), storage="")
    assert BuildOptions.of(options, threads=None, target="cpu", fallback=True) is options  # the defaults: nothing given twice
    with pytest.raises(PolytfError, match="cache_dir, threads given beside options=BuildOptions"):
        BuildOptions.of(options, threads=4, cache_dir="elsewhere")
