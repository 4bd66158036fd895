"""How to build a model: :class:`BuildOptions` (fallback, threads, target, cache, storage).

``polytf.load``, ``polytf.tune``, ``polytf.compile`` and the ``polytf`` commands take the
same five settings of the build; they make one ``BuildOptions`` of them, checked once here,
and hand it down beside the :class:`~polytf.compiler.model_source.ModelSource` (what is
read) to :func:`polytf.compiler.loading.load_model`,
:func:`polytf.autotune.model_tuner.tune_model` and :func:`polytf.export.compile_model`.

Unset settings keep their defaults, resolved when they are used, as before:
``threads=None`` is ``$POLYTF_THREADS`` or every CPU this process may use
(:func:`polytf.config.default_thread_count`); ``cache_dir=None`` is ``$POLYTF_CACHE_DIR`` or
the user's cache directory (:func:`polytf.storage.cache.default_cache_dir`);
``storage=None`` is ``$POLYTF_STORAGE``, else the cache directory
(:func:`polytf.storage.tuning_storage.storage_url`; ``""`` names the cache directory even
when the variable is set).

This module imports nothing heavy: ``import polytf`` and ``polytf --help`` load it.
"""

from __future__ import annotations

import numbers
import os
from dataclasses import dataclass, fields

from polytf.config import NO_CODE_CACHE_ENVIRONMENT_VARIABLE, default_thread_count
from polytf.errors import ArgumentError, PolytfError

__all__ = ["TARGET_NAMES", "BuildOptions"]

#: Target names a build accepts (``target=``, ``--target``): ``"cpu"``, the host CPU; ``"cuda"``,
#: the current NVIDIA GPU (:mod:`polytf.compiler.backends` makes the backend).
TARGET_NAMES = ("cpu", "cuda")


@dataclass(frozen=True)
class BuildOptions:
    """How a model is built. Immutable and checked when made.

    Attributes:
        fallback: nodes whose op has a numpy reference but no lowering (or a lowering that
            fails for their attributes) run on the host between the compiled kernels
            (:mod:`polytf.lowering.host_fallback`); False refuses such a model with
            :class:`~polytf.errors.UnsupportedOpError` instead.
        threads: threads per kernel, and the thread count of the tuning records used; None
            (or ``"auto"``): ``$POLYTF_THREADS`` or all available CPUs (:meth:`thread_count`).
            Ignored on a GPU.
        target: one of :data:`TARGET_NAMES`: ``"cpu"`` (native code for this machine's CPU)
            or ``"cuda"`` (PTX for the current NVIDIA GPU, run through CuPy). Tuning records
            are per target.
        cache_dir: the tuning-record cache directory; None: ``$POLYTF_CACHE_DIR`` or the user
            cache directory.
        storage: where tuning records (and, for tuning, the Optuna studies) live: None reads
            ``$POLYTF_STORAGE``, else the cache directory; ``"postgresql://USER@HOST/DATABASE"``
            a database shared by machines (needs ``pip install 'polytf[postgresql]'``; the URL
            is checked when the storage is opened).
        compile_cache: keep each compiled kernel's object code in the cache directory's
            ``objects/`` and link it on the next load instead of compiling again
            (:mod:`polytf.compiler.code_cache`); False (or ``POLYTF_NO_CODE_CACHE=1``)
            compiles everything afresh and keeps nothing, for debugging. On the CPU only.

    Raises:
        ArgumentError: a thread count below 1 (also a ValueError).
        PolytfError: a setting of the wrong kind or an unknown target (the message names the
            value).
    """

    fallback: bool = True
    threads: int | None = None
    target: str = "cpu"
    cache_dir: str | os.PathLike | None = None
    storage: str | None = None
    compile_cache: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.fallback, bool):
            raise PolytfError(f"fallback must be True or False, not {self.fallback!r}")
        if isinstance(self.threads, str) and self.threads.strip().lower() == "auto":
            object.__setattr__(self, "threads", None)  # "auto", as the command line spells the default
        if self.threads is not None:
            if isinstance(self.threads, bool) or not isinstance(self.threads, numbers.Integral) or self.threads < 1:
                raise ArgumentError(
                    f"threads must be a positive number of threads (or None or 'auto': $POLYTF_THREADS or all CPUs), not {self.threads!r}"
                )
            object.__setattr__(self, "threads", int(self.threads))
        if self.target not in TARGET_NAMES:  # select_target's message
            raise PolytfError(f"unknown target {self.target!r}; choose one of {', '.join(TARGET_NAMES)}")
        if self.cache_dir is not None and not isinstance(self.cache_dir, (str, os.PathLike)):
            raise PolytfError(f"the cache directory must be a directory name, not {self.cache_dir!r}")
        if not isinstance(self.compile_cache, bool):
            raise PolytfError(f"compile_cache must be True or False, not {self.compile_cache!r}")
        if self.storage is not None and not isinstance(self.storage, str):
            raise PolytfError(f"storage must be a URL such as postgresql://USER@HOST/DATABASE, not {self.storage!r}")

    def code_cache_enabled(self) -> bool:
        """``compile_cache``, unless ``$POLYTF_NO_CODE_CACHE`` is set to anything but ``0`` or empty."""
        return self.compile_cache and os.environ.get(NO_CODE_CACHE_ENVIRONMENT_VARIABLE, "") in ("", "0")

    def thread_count(self) -> int:
        """``threads``, or the default thread count (``$POLYTF_THREADS``, else every CPU this
        process may use), read now."""
        return self.threads or default_thread_count()

    @classmethod
    def of(cls, options: BuildOptions | None = None, **settings) -> BuildOptions:
        """``options`` itself when given, else the BuildOptions of ``settings`` (as the keyword
        arguments of ``polytf.load`` take them).

        Raises:
            PolytfError: ``options`` together with a setting other than its default (each
                setting is given once), or an invalid setting (see the class).
        """
        if options is None:
            return cls(**settings)
        defaults = {field.name: field.default for field in fields(cls)}
        given = sorted(name for name, value in settings.items() if value != defaults[name])
        if given:
            raise PolytfError(f"{', '.join(given)} given beside options=BuildOptions(...): give them in the BuildOptions")
        return options
