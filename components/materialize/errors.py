"""The one error the materialization job raises to its callers."""


class MaterializeError(RuntimeError):
    """The job cannot produce a usable run.

    Raised for bad arguments (missing input, non-empty output directory), when nothing is left
    after rejecting bad inputs, or when rejects exceed the configured fraction. The message is
    one line meant for the user; the CLI prints it without a traceback.
    """
