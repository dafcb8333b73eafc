"""The registry of residual kinds: name -> :class:`~wavygraph.nn.steppers.Stepper`
subclass, the options each one takes, and the modules of the kinds
registered from outside the package (plugins)."""
from __future__ import annotations

import inspect

from .base import Stepper

#: The registry of residual kinds, name -> class, in registration order.
STEPPERS: dict[str, type[Stepper]] = {}


def register_stepper(name: str, cls: type[Stepper] | None = None, *, replace: bool = False):
    """Register a residual kind under ``name`` (also usable as a class
    decorator, ``@register_stepper("name")``). ``cls`` must subclass
    :class:`Stepper`; its constructor's keyword arguments after ``tau`` are
    its options (``make_stepper(name, C, tau, **options)``). Raises
    :class:`ValueError` for a taken name unless ``replace=True``."""

    def add(cls: type[Stepper]) -> type[Stepper]:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"a residual name must be an identifier-like string, got {name!r}")
        if not (isinstance(cls, type) and issubclass(cls, Stepper)):
            raise ValueError(f"register_stepper({name!r}, ...) needs a subclass of wavygraph.nn.Stepper, got {cls!r}")
        if name in STEPPERS and STEPPERS[name] is not cls and not replace:
            raise ValueError(f"residual {name!r} is already registered ({STEPPERS[name].__name__}); pass replace=True")
        STEPPERS[name] = cls
        return cls

    return add if cls is None else add(cls)


def unregister_stepper(name: str) -> None:
    """Remove a registered kind (for tests and plugins)."""
    STEPPERS.pop(name, None)


def stepper_options(name: str) -> tuple[str, ...]:
    """The option names the kind's constructor takes after ``channels`` and ``tau``."""
    params = list(inspect.signature(get_stepper(name).__init__).parameters.values())[3:]
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def get_stepper(name: str) -> type[Stepper]:
    """The class registered as ``name``; :class:`ValueError` listing the kinds otherwise."""
    if name not in STEPPERS:
        raise ValueError(f"unknown residual {name!r}; choose one of {', '.join(map(repr, STEPPERS))}")
    return STEPPERS[name]


def plugin_modules(names) -> list[str]:
    """The modules that registered the kinds ``names`` from outside the
    package: what a config's ``imports`` must list so that another process
    (a sweep worker) knows those kinds too."""
    mods = [get_stepper(n).__module__ for n in names]
    return sorted({m for m in mods if m != "__main__" and m.split(".")[0] != "wavygraph"})


def make_stepper(name: str, channels: int, tau: float = 0.5, **options) -> Stepper:
    """Build a stepper by name (see :data:`STEPPERS`); ``options`` go to
    its constructor (``lam0`` for ``mix`` and the light waves). Unknown
    names or options raise :class:`ValueError` that lists the valid ones."""
    cls = get_stepper(name)
    allowed = stepper_options(name)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(
            f"residual {name!r} takes no option {', '.join(unknown)}"
            + (f"; its options: {', '.join(allowed)}" if allowed else "; it has no options")
        )
    return cls(channels, tau, **options)
