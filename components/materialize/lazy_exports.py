"""Package names that resolve on first use (a module `__getattr__`, PEP 562), so importing a
package costs only the modules its caller uses."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def resolver(package: str, exports: Mapping[str, str]) -> Callable[[str], object]:
    """The `__getattr__` of a package whose names live in its submodules.

    Args:
        package: the package's `__name__`.
        exports: exported name -> the submodule (relative to `package`) that defines it.

    Returns:
        A function that imports the submodule of an exported name on first use and returns the
        name's value; it raises AttributeError for any other name.

    Example:
        >>> __getattr__ = resolver(__name__, {"run_pairs": "pairs_pipeline"})  # doctest: +SKIP
    """

    def resolve(name: str) -> object:
        if name in exports:
            return getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return resolve
