"""Runs first inside the sandboxed interpreter: executes main.py as __main__ and turns how it
ended into an exit code the runner understands (see results.py; the numbers are repeated here
because this file runs by path, without the package on sys.path).
"""
from __future__ import annotations

import os
import sys
import traceback

EXIT_FAILED = 1
EXIT_ERROR = 2
EXIT_MEMORY = 3


def main() -> None:
    path = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.getcwd()  # as if `python main.py` were run in the work directory
    try:
        with open(path, encoding="utf-8") as fh:
            code = compile(fh.read(), path, "exec")
    except (SyntaxError, ValueError, UnicodeDecodeError):
        traceback.print_exc()
        sys.exit(EXIT_ERROR)
    namespace = {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__}
    try:
        exec(code, namespace)
    except MemoryError:
        # Little memory may be left: write the verdict without building a traceback.
        os.write(2, b"MemoryError: the sandbox memory limit was reached\n")
        os._exit(EXIT_MEMORY)
    except SystemExit:
        raise
    except BaseException:  # noqa: BLE001 - any uncaught exception is the program's failure
        traceback.print_exc()
        sys.exit(EXIT_FAILED)


if __name__ == "__main__":
    main()
