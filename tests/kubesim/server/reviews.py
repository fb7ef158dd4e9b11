"""The access reviews a client makes about itself: POSTed, evaluated for the
caller's token, answered (201) and never stored.

- SelfSubjectAccessReview (authorization.k8s.io/v1): "may I do this?",
  evaluated by the simulator's RBAC exactly as a request would be.
  kubernetes pkg/registry/authorization/selfsubjectaccessreview/rest.go
  (Create: validate, the user from the request, ResourceAttributesFrom /
  NonResourceAttributesFrom, the authorizer's decision into status allowed,
  denied, reason); pkg/apis/authorization/validation/validation.go
  (ValidateSelfSubjectAccessReview: exactly one of resourceAttributes and
  nonResourceAttributes, metadata empty); k8s.io/api authorization/v1
  types.go (the JSON fields). RBAC never denies (DecisionNoOpinion), so
  `denied` stays false and `reason` is empty when nothing allows.
- SelfSubjectReview (authentication.k8s.io/v1): "who am I?", the user the
  token authenticated as (pkg/registry/authentication/selfsubjectreview/
  rest.go). Both are granted to every authenticated user by system:basic-user
  (rbac.BUILTIN)."""
import errors
import util

SSAR_RES_FIELDS = ("namespace", "verb", "group", "version", "resource", "subresource", "name",
                   "fieldSelector", "labelSelector")
SSAR_NONRES_FIELDS = ("path", "verb")


def _invalid(kind, causes):
    """A 422 Invalid with field causes, as apierrors.NewInvalid(Kind, "", errs)."""
    msg = "; ".join(f"{f}: {m}" for f, m in causes)
    return errors.ApiError(422, f'{kind}.authorization.k8s.io "" is invalid: {msg}', "Invalid",
                           {"group": "authorization.k8s.io", "kind": kind,
                            "causes": [{"reason": "FieldValueInvalid", "message": m, "field": f}
                                       for f, m in causes]})


def _strings(d, fields, where):
    if not isinstance(d, dict):
        raise errors.bad_request(f"SelfSubjectAccessReview in version \"v1\" cannot be handled "
                                 f"as a SelfSubjectAccessReview: json: cannot unmarshal into Go "
                                 f"struct field SelfSubjectAccessReviewSpec.{where}")
    unknown = [k for k in d if k not in fields]
    if unknown:
        raise errors.bad_request(
            "SelfSubjectAccessReview in version \"v1\" cannot be handled as a "
            "SelfSubjectAccessReview: strict decoding error: " +
            ", ".join(f'unknown field "{where}.{k}"' for k in unknown))
    for k, v in d.items():
        if k in ("fieldSelector", "labelSelector"):
            continue
        if not isinstance(v, str):
            raise errors.bad_request(
                f"SelfSubjectAccessReview in version \"v1\" cannot be handled as a "
                f"SelfSubjectAccessReview: json: cannot unmarshal {type(v).__name__} into Go "
                f"struct field {where}.{k} of type string")


def _ssar(sim, res, user, obj):
    sim.api._decode_check(res, obj, "")
    md = obj.get("metadata") or {}
    if any(v not in (None, "", {}, []) for k, v in md.items()):
        raise _invalid("SelfSubjectAccessReview", [("metadata", "Invalid value: "
                                                    "\"...\": must be empty")])
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        spec = {}
    ra, nra = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if ra is not None and nra is not None:
        raise _invalid("SelfSubjectAccessReview", [(
            "spec.nonResourceAttributes",
            "Invalid value: \"...\": cannot be specified in combination with resourceAttributes")])
    if ra is None and nra is None:
        raise _invalid("SelfSubjectAccessReview", [(
            "spec.resourceAttributes",
            "Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes "
            "must be specified")])
    if ra is not None:
        _strings(ra, SSAR_RES_FIELDS, "resourceAttributes")
        # pkg/registry/authorization/util/helpers.go ResourceAttributesFrom
        a = {"verb": ra.get("verb", ""), "group": ra.get("group", ""),
             "resource": ra.get("resource", ""), "subresource": ra.get("subresource") or None,
             "namespace": ra.get("namespace", ""), "name": ra.get("name") or None}
    else:
        _strings(nra, SSAR_NONRES_FIELDS, "nonResourceAttributes")
        a = {"verb": nra.get("verb", ""), "path": nra.get("path", "")}
    allowed, reason = sim.authz.decide(user, a)
    status = {"allowed": allowed}
    if reason:
        status["reason"] = reason
    return {"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
            "metadata": {}, "spec": util.deep(spec), "status": status}


def _ssr(user, obj):
    if not isinstance(obj, dict):
        raise errors.bad_request("SelfSubjectReview in version \"v1\" cannot be handled as a "
                                 "SelfSubjectReview: json: cannot unmarshal into Go value")
    if obj.get("apiVersion") not in (None, "authentication.k8s.io/v1") or \
            obj.get("kind") not in (None, "SelfSubjectReview"):
        raise errors.bad_request(f"the API version in the data ({obj.get('apiVersion')}) does "
                                 "not match the expected API version (authentication.k8s.io/v1)")
    info = {"username": user.name, "groups": list(user.groups)}
    if user.uid:
        info["uid"] = user.uid
    return {"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": util.now_rfc3339()},
            "status": {"userInfo": info}}


def answer(sim, res, user, obj):
    if res.plural == "selfsubjectaccessreviews":
        return _ssar(sim, res, user, obj)
    if res.plural == "selfsubjectreviews":
        return _ssr(user, obj)
    raise errors.internal(f"no review {res.plural}")
