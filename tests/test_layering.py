"""Package layering: ``specsample.track`` is pure analysis (frame in, frame out) and never imports
``specsample.runs``, the package that starts processes."""

import ast
from pathlib import Path

import specsample

PACKAGE = Path(specsample.__file__).parent


def _imported_modules(path: Path) -> set[str]:
    """Every module a file imports, resolved to its absolute dotted name."""
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module.removesuffix(".__init__")
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module
            names.add(prefix)
            names.update(f"{prefix}.{alias.name}" for alias in node.names)
    return names


def test_track_imports_nothing_of_runs():
    files = sorted((PACKAGE / "track").rglob("*.py"))
    assert files, "no track modules found"
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(n for n in _imported_modules(path) if n.startswith("specsample.runs"))
        for path in files
    }
    assert not {k: v for k, v in offenders.items() if v}


def test_import_resolution_sees_runs_imports():
    # The check above would pass vacuously if relative imports were resolved wrongly.
    assert "specsample.runs.asv" in _imported_modules(PACKAGE / "runs" / "validate.py")
    assert "specsample.track.signoff.stats" in _imported_modules(PACKAGE / "runs" / "paired.py")
