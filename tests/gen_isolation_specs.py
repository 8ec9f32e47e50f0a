#!/usr/bin/python3
"""Write specs/NAME_{rc,rr,ser}.spec from specs/templates/NAME.spec.in.

Each isolation scenario runs at READ COMMITTED, REPEATABLE READ and
SERIALIZABLE; the templates say @LEVEL@ where the level goes. Run this after
changing a template; the generated specs are committed so that
pg_isolation_regress needs nothing but specs/.
"""
import pathlib

LEVELS = {"rc": "READ COMMITTED", "rr": "REPEATABLE READ", "ser": "SERIALIZABLE"}
specs = pathlib.Path(__file__).resolve().parent.parent / "specs"
for template in sorted((specs / "templates").glob("*.spec.in")):
    name = template.name[: -len(".spec.in")]
    text = template.read_text()
    for suffix, level in LEVELS.items():
        out = specs / f"{name}_{suffix}.spec"
        out.write_text(f"# Generated from templates/{template.name} by "
                       f"tests/gen_isolation_specs.py: {level}.\n" + text.replace("@LEVEL@", level))
