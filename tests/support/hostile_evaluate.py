"""``python tests/support/hostile_evaluate.py PROBLEM BACKEND [OPTION=VALUE ...]``: one objective
evaluation at the nominal values, as a user's script runs it, for the hostile-input corpus.
Prints ``ok=<bool> value=<value> reason=<reason>``; exit 0 when ok, 1 when not (or when
the problem does not load), anything else ends in a traceback."""

import sys

from petab_sciml.errors import PetabSciMLError
from petab_sciml.problem import load_problem


def _value(text):
    """An option's value: an integer, ``true`` / ``false``, else the text."""
    if text.isdigit():
        return int(text)
    return {"true": True, "false": False}.get(text.lower(), text)


options = {k: _value(v) for k, v in (a.split("=", 1) for a in sys.argv[3:])}
try:
    problem = load_problem(sys.argv[1], backend=sys.argv[2])
except PetabSciMLError as exc:
    print(exc)
    sys.exit(1)
evaluation = problem.simulator(**options).evaluate(grad=False)
print(f"ok={evaluation.ok} value={evaluation.value} reason={evaluation.reason}")
sys.exit(0 if evaluation.ok else 1)
