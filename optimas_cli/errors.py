"""Errors meant for the user: each names the problem and the fix, and the CLI prints it in one line."""
from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix (bad input, missing data, missing key). Exit code 2, no traceback."""

    def __init__(self, problem: str, fix: str | None = None):
        self.problem, self.fix = problem, fix
        super().__init__(f"{problem} — {fix}" if fix else problem)


class DataError(UserError):
    """A data file is missing or has a malformed row (reported with file and line)."""


class LMCallFailed(UserError):
    """An LM call failed for good mid-run (server gone, HTTP errors past the retries, a reply that is no
    completion): the run stops without results and resumes once the cause is fixed; the calls made so
    far are in the call cache and are counted when the resumed run replays them."""
