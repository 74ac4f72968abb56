"""The errors (and the warnings) of the tuning layer that callers are meant to catch."""


class TuneError(ValueError):
    """A tuning request that cannot run as given: a bad budget, an unknown strategy, cost
    model or scheduler, a work dir that cannot be written. The message says what to change."""


class DatabaseError(TuneError):
    """A database that cannot be opened or written: not a looptune database, damaged, or from
    a newer looptune. A failed open changes nothing in the file."""


class ServerUnreachableError(DatabaseError):
    """A database server that cannot be reached now (refused, down, connection lost), as
    opposed to a wrong URL, credentials or database name: a synced database carries on in its
    local database and sends the records when the server is back."""


class DatabaseWarning(UserWarning):
    """A stored record or workload was skipped (corrupt, truncated, from another format,
    implausible, or a trace that no longer replays); everything else in the database is used.
    Also the note that a work dir is used as the kind of database it holds (JSON, or both
    kinds) rather than the default."""


class BudgetWarning(UserWarning):
    """A tuning budget too small to give every task its first batch: the message says which
    tasks it covers and the budget that would cover them all."""


class SimulationError(TuneError):
    """A SimulatedRunner was asked about a schedule its table of measurements does not hold
    (with on_missing="error"), or for another target than the table's."""
