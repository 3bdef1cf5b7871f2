"""The one exception hierarchy of sq_jax.

Every error sq_jax raises on purpose derives from :class:`SqJaxError`, so a caller can
catch them all with one ``except``. Messages say what was received, what was expected,
and how to fix it, quoting the offending token, term or tensor.

Example:
    >>> import sq_jax as sq
    >>> try:
    ...     sq.parse("R{a1;i1} = f{a1;q1}")
    ... except sq.SqJaxError as err:
    ...     print(type(err).__name__)
    ParseError
"""

from __future__ import annotations


class SqJaxError(Exception):
    """Root of every error raised by sq_jax."""


class ParseError(SqJaxError, ValueError):
    """Text in SeQuant syntax could not be read.

    Attributes:
        line: 1-based line number of the offending text.
        column: 1-based column of the first offending character.
        length: number of offending characters (at least 1).
        source_line: the whole line, for display.
        reason: the message without the location and caret.
    """

    def __init__(
        self, reason: str, *, line: int = 1, column: int = 1, length: int = 1, source_line: str = ""
    ) -> None:
        self.reason = reason
        self.line = line
        self.column = column
        self.length = max(1, length)
        self.source_line = source_line
        caret = " " * (column - 1) + "^" * self.length
        text = f"line {line}, column {column}: {reason}"
        if source_line:
            text += f"\n  {source_line}\n  {caret}"
        super().__init__(text)


class ExpressionError(SqJaxError, ValueError):
    """An expression is well-formed text but not a valid tensor equation."""


class SpaceError(SqJaxError, ValueError):
    """An index space is unknown, badly declared, or has no extent where one is needed."""


class InputError(SqJaxError, ValueError):
    """An input tensor is missing, or has the wrong shape or dtype."""


class PlanError(SqJaxError, ValueError):
    """A batch plan is inconsistent with the equations or the spaces."""


class ScheduleError(SqJaxError):
    """The scheduler cannot express the requested batching."""


class LoweringError(ScheduleError):
    """The ordered schedule asks for something the JAX lowering cannot express."""


class MemoryBudgetError(PlanError):
    """No batch plan fits the requested memory budget."""


class PipelineOrderError(SqJaxError):
    """A pass was called on an IR value that has not reached the stage it needs."""


class ConvergenceError(SqJaxError, RuntimeError):
    """An iterative solve stopped without converging, and the caller asked it to raise.

    Attributes:
        iterations: iterations taken before it stopped.
        residual_norm: ‖R‖ at the start of the last iteration (``nan`` with none).
        result: the solver's unconverged result, for inspection (or ``None``).
    """

    def __init__(
        self, message: str, *, iterations: int, residual_norm: float, result: object = None
    ) -> None:
        self.iterations = iterations
        self.residual_norm = residual_norm
        self.result = result
        super().__init__(message)
