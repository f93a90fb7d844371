"""``python tests/support/hostile_load.py PROBLEM``: ``load_problem`` as a user's script calls it,
for the hostile-input corpus.  Prints the problem's issues and ``loaded`` (exit 0), or the
error of a documented kind (exit 1); anything else ends in a traceback, which the corpus
test counts as a failure."""

import sys

from petab_sciml.errors import PetabSciMLError
from petab_sciml.problem import load_problem

try:
    problem = load_problem(sys.argv[1])
except PetabSciMLError as exc:
    print(exc)
    sys.exit(1)
for issue in problem.issues:
    print(issue)
print("loaded")
