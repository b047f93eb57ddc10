"""Malformed requests get a 4xx and one log line, never a 500.

Dash trusts the body of a callback request to be what its renderer sends: a JSON object naming a
registered output, with one entry per declared input and state. Anything else (`null`, `[]`, a
missing or unknown output, inputs of the wrong count or shape) made it raise, which Flask turned
into a 500. The body's shape is checked here before Dash sees it; a well-shaped request whose
values a callback cannot take (a pathname that is a number) ends in the callback raising a
TypeError or the like, answered 400 as well; a file outside Dash's registered component bundles
(`/_dash-component-suites/../..`; Dash never reads such a file) is a 404. Everything the server
itself fails at stays a 500, logged with its traceback.
"""

from __future__ import annotations

import logging

from dash import Dash
from dash.exceptions import DependencyException
from flask import Response, request
from werkzeug.exceptions import HTTPException

CALLBACK_PATH = "/_dash-update-component"
# A callback body carries view state and the panels' relayout data: a few kB. Larger is no
# request the renderer makes.
MAX_BODY_BYTES = 256 * 1024
# Exceptions a callback raises on values of the wrong type or shape: the request's fault.
_BAD_VALUES = (TypeError, ValueError, LookupError, AttributeError, RecursionError)
# Characters of a path or reason a log line shows.
_SHOWN = 120

log = logging.getLogger("gapwatch.dashboard")


def install(app: Dash) -> None:
    server = app.server
    server.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES

    @server.before_request
    def _check_callback_body():
        if request.path != CALLBACK_PATH or request.method != "POST":
            return None
        try:
            body = request.get_json(silent=True)
        except RecursionError:
            return refuse(400, "the body is nested too deep")
        problem = callback_problem(body, app.callback_map)
        return refuse(400, problem) if problem else None

    @server.errorhandler(DependencyException)
    def _no_such_bundle(_exc):
        return refuse(404, "no such component file")

    @server.errorhandler(HTTPException)
    def _http_error(exc: HTTPException):
        if exc.code is not None and exc.code < 500:
            log.warning(_line(exc.code, exc.name))
        return exc

    @server.errorhandler(Exception)
    def _callback_error(exc: Exception):
        if request.path == CALLBACK_PATH and isinstance(exc, _BAD_VALUES):
            return refuse(400, f"a callback could not take these values ({type(exc).__name__})")
        log.exception(_line(500, "internal error"))
        return Response("internal server error\n", status=500, mimetype="text/plain")


def callback_problem(body, callback_map: dict) -> str | None:
    """What is wrong with a callback request body, or None when it has the renderer's shape."""
    if not isinstance(body, dict):
        return "the body is not a JSON object"
    output = body.get("output")
    if not isinstance(output, str) or output not in callback_map:
        return "no such callback output"
    declared = callback_map[output]
    if "callback" not in declared:
        return "a browser-side callback"
    if not isinstance(body.get("outputs"), (dict, list)):
        return "'outputs' is missing or not an object"
    for part in ("inputs", "state"):
        given = body.get(part, [] if part == "state" else None)
        if not isinstance(given, list) or len(given) != len(declared.get(part, [])):
            return f"'{part}' is not a list of {len(declared.get(part, []))} entries"
        if not all(_is_dependency(item) for item in given):
            return f"an entry of '{part}' is not an id, property and value"
    if not isinstance(body.get("changedPropIds", []), list):
        return "'changedPropIds' is not a list"
    return None


def _is_dependency(item) -> bool:
    """One input or state: {id, property, value}, or a list of them (a pattern like ALL)."""
    return all(isinstance(i, dict) and "id" in i and isinstance(i.get("property"), str)
               for i in (item if isinstance(item, list) else [item]))


def refuse(status: int, reason: str) -> Response:
    log.warning(_line(status, reason))
    return Response(f"{reason}\n", status=status, mimetype="text/plain")


def _line(status: int, reason: str) -> str:
    path = request.path if len(request.path) <= _SHOWN else request.path[:_SHOWN] + "..."
    return f"{status} {request.method} {path!r} from {request.remote_addr}: {reason}"
