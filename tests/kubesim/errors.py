"""Kubernetes `Status` errors with the apiserver's reasons, codes and message formats
(k8s.io/apimachinery/pkg/api/errors)."""

REASONS = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
    405: "MethodNotAllowed", 406: "NotAcceptable", 409: "Conflict", 410: "Gone",
    413: "RequestEntityTooLarge", 415: "UnsupportedMediaType", 422: "Invalid",
    429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout",
}


class ApiError(Exception):
    def __init__(self, code, message, reason=None, details=None, headers=None, text=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason if reason is not None else REASONS.get(code, "")
        self.details = details
        self.headers = headers or {}
        self.text = text   # answered as text/plain instead of a Status (a filter's http.Error)

    def status(self):
        s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
             "message": self.message, "reason": self.reason, "code": self.code}
        if self.details is not None:
            s["details"] = self.details
        if not s["reason"]:
            del s["reason"]
        return s


def qualified(res):
    """`virtualmachines.kubevirt.io` or `secrets` (core group)."""
    return f"{res.plural}.{res.group}" if res.group else res.plural


def _details(res, name, extra=None):
    d = {}
    if name:
        d["name"] = name
    if res.group:
        d["group"] = res.group
    d["kind"] = res.plural
    if extra:
        d.update(extra)
    return d


def not_found(res, name):
    return ApiError(404, f'{qualified(res)} "{name}" not found', "NotFound", _details(res, name))


def already_exists(res, name):
    return ApiError(409, f'{qualified(res)} "{name}" already exists', "AlreadyExists",
                    _details(res, name))


def conflict(res, name, why="the object has been modified; please apply your changes to the "
                              "latest version and try again"):
    return ApiError(409, f'Operation cannot be fulfilled on {qualified(res)} "{name}": {why}',
                    "Conflict", _details(res, name))


def invalid(res, name, causes):
    """causes: list of (reason, field, message-without-field)."""
    parts = []
    cs = []
    for reason, field, msg in causes:
        parts.append(f"{field}: {msg}" if field else msg)
        c = {"reason": reason, "message": f"{field}: {msg}" if field else msg}
        if field:
            c["field"] = field
        cs.append(c)
    kindg = f"{res.kind}.{res.group}" if res.group else res.kind
    if len(parts) == 1:
        text = parts[0]
    else:
        text = "[" + ", ".join(parts) + "]"
    d = _details(res, name)
    d["kind"] = res.kind
    d["causes"] = cs
    return ApiError(422, f'{kindg} "{name}" is invalid: {text}', "Invalid", d)


def bad_request(msg):
    return ApiError(400, msg, "BadRequest")


def forbidden(res_or_none, name, msg, group=""):
    if res_or_none is None:
        return ApiError(403, f"forbidden: {msg}", "Forbidden", {})
    res = res_or_none
    q = qualified(res)
    text = f'{q} "{name}" is forbidden: {msg}' if name else f"{q} is forbidden: {msg}"
    return ApiError(403, text, "Forbidden", _details(res, name))


def unauthorized():
    return ApiError(401, "Unauthorized", "Unauthorized")


def method_not_allowed(method="", path=""):
    return ApiError(405, "the server does not allow this method on the requested resource",
                    "MethodNotAllowed", {})


def unsupported_media(types):
    return ApiError(415, "the body of the request was in an unknown format - accepted media "
                         "types include: " + ", ".join(types), "UnsupportedMediaType", {})


def expired(msg):
    return ApiError(410, msg, "Expired")


def internal(msg):
    return ApiError(500, f"Internal error occurred: {msg}", "InternalError",
                    {"causes": [{"message": msg}]})


def generic(code, msg=None, res=None, name=None, retry_after=None):
    reason = REASONS.get(code, "")
    default = {
        500: "Internal error occurred: simulated fault",
        503: "the server is currently unable to handle the request",
        429: "the server has received too many requests and has asked us to try again later",
        504: "the server was unable to return a response in the time allotted, but may still be "
             "processing the request",
        502: "the server responded with the status code 502 but did not return more information",
        409: "the server reported a conflict",
        403: "the server does not allow access to the requested resource",
        404: "the server could not find the requested resource",
        401: "the server has asked for the client to provide credentials",
        400: "the server rejected our request for an unknown reason",
        422: "the server rejected our request due to an error in our request",
    }
    details = _details(res, name) if res is not None else {}
    headers = {}
    if retry_after is not None:
        details["retryAfterSeconds"] = retry_after
        headers["Retry-After"] = str(retry_after)
    return ApiError(code, msg or default.get(code, f"simulated fault {code}"), reason, details,
                    headers)


# API Priority and Fairness: the flow schema and priority level a rejected
# request was classified in (their UIDs; workload-low for service accounts)
APF_FLOW_SCHEMA_UID = "5f2ce7a4-0e4b-4b8c-9a2e-6c1f0d3b8a11"
APF_PRIORITY_LEVEL_UID = "b1d9e0c2-7a43-4f6e-8d15-2c9a7e4f3b22"


def apf_rejected(retry_after=1):
    """k8s.io/apiserver v0.34 pkg/server/filters/priority-and-fairness.go: a
    request that no queue takes is rejected by tooManyRequests()
    (maxinflight.go): `Retry-After`, http.Error's text/plain body (no Status),
    after setResponseHeaders() named the flow schema and priority level."""
    ra = 1 if retry_after is None else retry_after
    return ApiError(429, "Too many requests, please try again later.", "TooManyRequests", None,
                    {"Retry-After": str(ra),
                     "X-Kubernetes-PF-FlowSchema-UID": APF_FLOW_SCHEMA_UID,
                     "X-Kubernetes-PF-PriorityLevel-UID": APF_PRIORITY_LEVEL_UID,
                     "X-Content-Type-Options": "nosniff"},
                    text="Too many requests, please try again later.\n")
