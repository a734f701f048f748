"""The console's actions (``POST``): signal, approve, resolve, cancel and fork an
execution, and signing in and out.

Each action checks the session (signed in, the form's CSRF token, not
``--read-only``), parses the form (:mod:`~phronomy_fsm.console.forms`) and calls
:mod:`phronomy_fsm.operator` — the same functions as ``phronomy-fsm signal``,
``approve``, ``resolve`` and ``cancel`` — always with the revision the page showed. A
refused action re-renders the page as the store has it now with the error on top (409
for a conflict: the page was stale) and writes nothing; an accepted one redirects to
the page (``303``, post/redirect/get) with a notice naming the signal it wrote.

Must not: write to a store except through :mod:`phronomy_fsm.operator`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from phronomy_fsm import operator
from phronomy_fsm.errors import ForkRefusedError, PhronomyError

from . import views
from .forms import (
    parse_approval_form,
    parse_cancel_form,
    parse_fork_form,
    parse_resolve_form,
    parse_signal_form,
)
from .pages import error_page, render, session_of, show_execution, status_for

if TYPE_CHECKING:
    from .app import Console

#: What the console's signals record as their sender.
SENDER = "console"


# ------------------------------------------------------------------ actions


async def _write_form(console: Console, request: Request) -> tuple[dict[str, Any], Response | None]:
    """The submitted fields, or a refusal (403) when the console is read-only, the
    session has not signed in, or the CSRF token does not match."""
    form = await request.form()
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    session = session_of(request)
    if console.security.read_only:
        return fields, error_page(
            console, request, 403, "this console is read-only (--read-only); nothing was written"
        )
    if not console.security.is_valid_csrf(session, fields.get("csrf")):
        return fields, error_page(
            console,
            request,
            403,
            "the form's CSRF token does not match: the page was shown to another session "
            "(signed in or out since? reload it); nothing was written",
        )
    if not session.authenticated:
        return fields, error_page(
            console,
            request,
            403,
            "writes need the console's token: sign in first (a session ends when you sign "
            f"out, after {console.security.sessions.describe_limits()}, and when the "
            "console restarts); nothing was written",
        )
    return fields, None


async def _refused(
    console: Console, request: Request, fields: Mapping[str, Any], kind: str, exc: BaseException
) -> Response:
    status = status_for(exc)
    conflict = status == 409
    message = str(exc)
    if conflict:
        message = f"conflict: {message}. The page below shows the execution as it is now."
    execution_id = str(fields.get("execution_id", ""))
    if not execution_id:
        return error_page(console, request, status, message)
    return await show_execution(
        console,
        request,
        execution_id,
        error=message,
        conflict=conflict,
        status_code=status,
        failed={"kind": kind, **{k: v for k, v in fields.items() if k != "csrf"}},
    )


def _done(execution_id: str, seq: int) -> Response:
    return RedirectResponse(f"{views.execution_href(execution_id)}&sent={seq}", status_code=303)


async def _write(
    console: Console,
    request: Request,
    kind: str,
    parse: Callable[[Mapping[str, Any]], Any],
    act: Callable[[Any, Any], Any],
) -> Response:
    """One write form: check the session (:func:`_write_form`), ``parse`` the fields
    into a form, run ``act(store, form)`` — an operator-library call — off the event
    loop on the writer store, then redirect to the execution with the sent signal's
    seq; a refused form or call shows the page again with the error (``kind`` names
    the form)."""
    fields, refused = await _write_form(console, request)
    if refused is not None:
        return refused
    try:
        form = parse(fields)
        receipt = await run_in_threadpool(lambda: act(console.stores.writer(), form))
    except PhronomyError as exc:  # FormError, SignalRefusedError, ApprovalError, ...
        return await _refused(console, request, fields, kind, exc)
    return _done(form.execution_id, receipt.signal.seq)


async def signal_action(console: Console, request: Request) -> Response:
    """``POST /execution/signal``: :func:`phronomy_fsm.operator.signal_execution` with
    the page's revision (``expected_revision``)."""
    return await _write(
        console,
        request,
        "signal",
        parse_signal_form,
        lambda store, form: operator.signal_execution(
            store,
            form.execution_id,
            form.event,
            form.payload,
            expected_revision=form.expected_revision,
            signal_id=form.signal_id,
            sender=SENDER,
            clock=console.clock,
        ),
    )


async def approve_action(console: Console, request: Request) -> Response:
    """``POST /execution/approve``: :func:`phronomy_fsm.operator.approve_execution`
    (the request is checked against the stored execution, which must still be at the
    page's revision) — the decision of an agent execution's approval request."""
    return await _write(
        console,
        request,
        "approve",
        parse_approval_form,
        lambda store, form: operator.approve_execution(
            store,
            form.execution_id,
            approval_request_id=form.request_id,
            approved=form.approved,
            decisions=form.decisions,
            by=form.by or SENDER,
            expected_revision=form.expected_revision,
            sender=SENDER,
            clock=console.clock,
        ),
    )


async def resolve_action(console: Console, request: Request) -> Response:
    """``POST /execution/resolve``: :func:`phronomy_fsm.operator.resolve_execution`
    with the page's revision and subject."""
    return await _write(
        console,
        request,
        "resolve",
        parse_resolve_form,
        lambda store, form: operator.resolve_execution(
            store,
            form.execution_id,
            expected_revision=form.expected_revision,
            outcome=form.outcome,
            result=form.result,
            error=form.error,
            subject=form.subject,
            signal_id=form.signal_id,
            sender=SENDER,
            clock=console.clock,
        ),
    )


async def cancel_action(console: Console, request: Request) -> Response:
    """``POST /execution/cancel``: :func:`phronomy_fsm.operator.cancel_execution` with
    the page's revision."""
    return await _write(
        console,
        request,
        "cancel",
        parse_cancel_form,
        lambda store, form: operator.cancel_execution(
            store,
            form.execution_id,
            reason=form.reason,
            expected_revision=form.expected_revision,
            signal_id=form.signal_id,
            sender=SENDER,
            clock=console.clock,
        ),
    )


async def fork_action(console: Console, request: Request) -> Response:
    """``POST /execution/fork``: :func:`phronomy_fsm.operator.plan_fork` (``action=plan``:
    the page again with the plan) or :func:`phronomy_fsm.operator.fork_execution`
    (``action=fork``: to the new execution's page; refused: the page with the plan and
    why, nothing written)."""
    fields, refused = await _write_form(console, request)
    if refused is not None:
        return refused
    try:
        form = parse_fork_form(fields)
        act = operator.plan_fork if form.plan_only else operator.fork_execution
        plan = await run_in_threadpool(
            lambda: act(
                console.stores.writer(),
                form.execution_id,
                form.revision,
                execution_id=form.fork_id,
                allow_effects=form.allow_effects,
                new_keys=form.new_keys,
            )
        )
    except ForkRefusedError as exc:
        refused_plan = getattr(exc, "plan", None)
        if refused_plan is None:
            return await _refused(console, request, fields, "fork", exc)
        return await show_execution(
            console,
            request,
            form.execution_id,
            error=str(exc),
            status_code=409,
            failed={"kind": "fork", **{k: v for k, v in fields.items() if k != "csrf"}},
            fork_plan=refused_plan.to_dict(),
        )
    except PhronomyError as exc:
        return await _refused(console, request, fields, "fork", exc)
    if form.plan_only:
        return await show_execution(
            console,
            request,
            form.execution_id,
            failed={"kind": "fork", **{k: v for k, v in fields.items() if k != "csrf"}},
            fork_plan=plan.to_dict(),
        )
    return RedirectResponse(views.execution_href(plan.execution_id), status_code=303)


# ------------------------------------------------------------------ signing in


def _next_path(value: object) -> str:
    """A local path to go to after signing in (``/`` unless ``value`` is one)."""
    text = value if isinstance(value, str) else ""
    if not text.startswith("/") or text.startswith("//") or "\\" in text:
        return "/"
    return text


async def login_page(console: Console, request: Request) -> Response:
    """``GET /login``: the sign-in form (the write token), saying how long signing in
    lasts."""
    return render(
        console,
        request,
        "login.html",
        next_path=_next_path(request.query_params.get("next")),
        session_limits=console.security.sessions.describe_limits(),
        error=None,
    )


async def login_action(console: Console, request: Request) -> Response:
    """``POST /login``: check the CSRF token and the write token; on success a new
    session signed in on the server (:meth:`ConsoleSecurity.sign_in
    <phronomy_fsm.console.security.ConsoleSecurity.sign_in>`; the one that signed in
    ends if it was signed in), 403 and the form again otherwise."""
    form = await request.form()
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    session = session_of(request)
    next_path = _next_path(fields.get("next"))
    if not console.security.is_valid_csrf(session, fields.get("csrf")):
        return error_page(console, request, 403, "the form's CSRF token does not match")
    if console.security.token is None:
        return error_page(console, request, 403, "this console is read-only: there is no token")
    if not console.security.is_valid_token(fields.get("token", "")):
        return render(
            console,
            request,
            "login.html",
            403,
            next_path=next_path,
            session_limits=console.security.sessions.describe_limits(),
            error="that is not the console's token",
        )
    request.scope["state"]["new_session"] = console.security.sign_in(session)
    return RedirectResponse(next_path, status_code=303)


async def logout_action(console: Console, request: Request) -> Response:
    """``POST /logout`` (CSRF-checked): end the session on the server — a copy of its
    cookie kept anywhere is signed out from now on — and give the browser a new,
    signed-out one (:meth:`ConsoleSecurity.sign_out
    <phronomy_fsm.console.security.ConsoleSecurity.sign_out>`)."""
    form = await request.form()
    session = session_of(request)
    if not console.security.is_valid_csrf(session, form.get("csrf")):  # type: ignore[arg-type]
        return error_page(console, request, 403, "the form's CSRF token does not match")
    request.scope["state"]["new_session"] = console.security.sign_out(session)
    return RedirectResponse("/", status_code=303)


__all__ = [
    "SENDER",
    "approve_action",
    "cancel_action",
    "login_action",
    "login_page",
    "logout_action",
    "resolve_action",
    "signal_action",
]
