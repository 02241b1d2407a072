"""The test suite's own checks run: no statement whose second check is skipped or never asserted."""

import ast
import glob
import os


def test_no_check_is_silently_skipped():
    """``check_a() and check_b()`` never runs check_b (check_a returns None); ``assert (x, msg)`` is
    always true; a bare comparison asserts nothing."""
    here = os.path.dirname(os.path.abspath(__file__))
    found = []
    for path in sorted(glob.glob(os.path.join(here, "*.py"))):
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Assert) and isinstance(node.test, ast.Tuple):
                found.append(f"{os.path.basename(path)}:{node.lineno} asserts a tuple")
            if isinstance(node, ast.Expr) and isinstance(node.value, (ast.BoolOp, ast.Compare)):
                found.append(f"{os.path.basename(path)}:{node.lineno} a bare and/or/comparison statement")
    assert not found, found
