"""The one exception hierarchy of sq_jax.

Every error sq_jax raises on purpose derives from :class:`SqJaxError`, so a caller can
catch them all with one ``except``. Messages say what was received, what was expected,
and how to fix it, quoting the offending token, term or tensor.

The scheduler's refusals are one :class:`ScheduleError` subclass per case, below the
stage errors: every input the scheduler cannot express raises, never asserts; messages
name the value (its id and expression), the loops involved, and how to fix the input.

Example:
    >>> import sq_jax as sq
    >>> try:
    ...     sq.parse("R{a1;i1} = f{a1;q1}")
    ... except sq.SqJaxError as err:
    ...     print(type(err).__name__)
    ParseError
    >>> issubclass(LoopOrderCycleError, sq.ScheduleError)
    True
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


# -- the scheduler's refusals (ScheduleError subclasses) ------------------------------


class AnnotationError(ScheduleError):
    """A loop annotation does not fit its node (wrong mode, shadowed label, ...)."""


class LoopKindConflictError(ScheduleError):
    """One loop instance was opened both as ``External`` and as ``Contracted``."""


class UnknownValueError(ScheduleError):
    """A value of the rich schedule has no node in the forest it is analysed against."""


class DemotionFixpointError(ScheduleError):
    """The legality demotion fixpoint did not settle within its round cap."""


class StepCycleError(ScheduleError):
    """The steps of one block cannot be ordered: their dependencies form a cycle."""


class LoopOrderCycleError(ScheduleError):
    """The required (outer, inner) loop nesting pairs contradict each other."""


class ReductionWithoutSlotError(ScheduleError):
    """A value reduces a batched mode that no loop instance was assigned to."""


class LaterPassReaderError(ScheduleError):
    """A later-pass reader in another nest needs a value that never leaves its loop."""


class UnescapedNonLocalError(ScheduleError):
    """Materializing a value across a pass split found a non-local axis with no escape."""


class PartialSumReadError(ScheduleError):
    """A value would read a sum escape from inside its loop in the same pass."""


class MalformedScheduleError(ScheduleError):
    """The ordered schedule the builder produced breaks a ``well_formed`` rule."""


class InternalScheduleError(ScheduleError):
    """An internal invariant of the scheduler does not hold (a bug; please report it)."""


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
