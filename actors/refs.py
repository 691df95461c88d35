"""Typed references to the actors: a `Ref[M]` takes in `tell` only the messages its actor
handles (the union `M` in `actors.messages`), so mypy finds a message sent to the wrong
actor. A pykka `ActorRef` is one for every `M` (its `tell` takes anything); the types live
only in the annotations of whoever holds it."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

M_contra = TypeVar("M_contra", contravariant=True)


class Ref(Protocol[M_contra]):
    """An actor that handles the messages `M`."""

    def tell(self, message: M_contra) -> None: ...

    def is_alive(self) -> bool: ...


class AskRef(Ref[M_contra], Protocol[M_contra]):
    """A `Ref` that is also asked (and waited for: only outside the actors, `Sync`) and
    stopped by whoever started it."""

    def ask(self, message: M_contra, *, timeout: float | None = None) -> Any: ...

    def stop(self) -> object: ...


class NotStarted:
    """The reference a `BrokerContext` holds for an actor the broker has not started yet:
    nothing may reach it, so telling or asking it is a bug and says which actor."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def tell(self, message: object) -> None:
        raise RuntimeError(f"{self._name} is not started yet: {message!r} cannot reach it")

    def ask(self, message: object, *, timeout: float | None = None) -> Any:
        raise RuntimeError(f"{self._name} is not started yet: {message!r} cannot reach it")

    def stop(self) -> object:
        return None

    def is_alive(self) -> bool:
        return False
