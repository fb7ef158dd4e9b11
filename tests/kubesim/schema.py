"""Strict structural validation against the upstream OpenAPI schemas.

Custom resources (kubevirt.io, cdi.kubevirt.io) are checked against the
swagger files in reference/ (copies of ../shared/reference: kubevirt-swagger.json, cdi-swagger.json);
core kinds that have no schema file here (Secret, Pod, PVC, Event, Namespace,
Node, ServiceAccount, RBAC) against python3-kubernetes' model field maps
(openapi_types / attribute_map), the Kubernetes 1.22 API.

An unknown field is an error (as with fieldValidation=Strict) and so is a
value of the wrong JSON type."""
import importlib
import json
import os
import re

from util import valid_quantity

HERE = os.path.dirname(os.path.abspath(__file__))


def _find_reference_dir():
    """The upstream schemas: a copy ships in tests/kubesim/reference (byte-exact,
    provenance in its SOURCES.md), so a clone validates without anything outside
    the repository; KUBESIM_REFERENCE may point elsewhere. Without them the
    simulator refuses to start: validation must never silently pass."""
    for c in (os.environ.get("KUBESIM_REFERENCE", ""), os.path.join(HERE, "reference")):
        if c and os.path.exists(os.path.join(c, "kubevirt-swagger.json")):
            return os.path.abspath(c)
    raise RuntimeError("kubesim: the upstream OpenAPI schemas are missing "
                       f"(expected {os.path.join(HERE, 'reference')}/kubevirt-swagger.json)")


QUANTITY_DEFS = {"k8s.io.apimachinery.pkg.api.resource.Quantity", "resource.Quantity",
                 "io.k8s.apimachinery.pkg.api.resource.Quantity"}
INTORSTR_DEFS = {"k8s.io.apimachinery.pkg.util.intstr.IntOrString", "intstr.IntOrString",
                 "io.k8s.apimachinery.pkg.util.intstr.IntOrString"}
ANY = {"x-any": True}


class SchemaError:
    def __init__(self, kind, path, msg, value=None):
        self.kind = kind       # "unknown" | "type" | "format"
        self.path = path
        self.msg = msg
        self.value = value


class Swagger:
    def __init__(self, path, defs=None):
        if defs is not None:
            self.defs = defs
            return
        with open(path) as f:
            self.defs = json.load(f)["definitions"]

    def resolve(self, s):
        while isinstance(s, dict) and "$ref" in s:
            name = s["$ref"].split("/")[-1]
            if name in QUANTITY_DEFS:
                return {"x-quantity": True}
            if name in INTORSTR_DEFS:
                return {"x-int-or-string": True}
            s = self.defs.get(name, ANY)
        return s

    def root(self, name):
        return self.resolve({"$ref": "#/definitions/" + name})


class OpenAPI3(Swagger):
    """An OpenAPI 3 document of Kubernetes (components.schemas), e.g.
    k8s-networking.k8s.io-v1-openapi.json for NetworkPolicy."""

    def __init__(self, path):
        with open(path) as f:
            self.defs = json.load(f)["components"]["schemas"]


_LIST = re.compile(r"^list\[(.*)\]$")
_DICT = re.compile(r"^dict\(([^,]+),\s*(.*)\)$")


class Models:
    """Schemas made from python3-kubernetes' model classes."""

    def __init__(self):
        self.mod = None
        try:
            self.mod = importlib.import_module("kubernetes.client.models")
        except Exception:  # noqa: BLE001 - validation of core kinds then only checks JSON types
            self.mod = None
        self.cache = {}

    def root(self, model):
        return self.of_type(model)

    def of_type(self, t):
        t = t.strip()
        if t in self.cache:
            return self.cache[t]
        if t == "str" or t == "datetime" or t == "date":
            s = {"type": "string"}
        elif t == "int":
            s = {"type": "integer"}
        elif t == "float":
            s = {"type": "number"}
        elif t == "bool":
            s = {"type": "boolean"}
        elif t == "object":
            s = ANY
        elif _LIST.match(t):
            s = {"type": "array", "items": None, "_item": _LIST.match(t).group(1)}
        elif _DICT.match(t):
            s = {"type": "object", "_value": _DICT.match(t).group(2)}
        else:
            cls = getattr(self.mod, t, None) if self.mod else None
            if cls is None:
                s = ANY
            else:
                s = {"type": "object", "properties": None, "_model": cls}
        self.cache[t] = s
        return s

    def props(self, s):
        if s.get("properties") is None and "_model" in s:
            cls = s["_model"]
            s["properties"] = {cls.attribute_map[a]: self.of_type(tp)
                               for a, tp in cls.openapi_types.items()}
            if cls.__name__ == "V1Secret":
                pass
        return s.get("properties")


class Validator:
    def __init__(self):
        ref = _find_reference_dir()
        self.ref = ref
        self.kv = Swagger(os.path.join(ref, "kubevirt-swagger.json")) if ref else None
        self.cdi = Swagger(os.path.join(ref, "cdi-swagger.json")) if ref else None
        self.models = Models()
        import multus
        self.multus = Swagger(None, multus.NAD_DEFS)
        p = os.path.join(ref, "k8s-networking.k8s.io-v1-openapi.json") if ref else None
        self.net = OpenAPI3(p) if p and os.path.exists(p) else None

    # ------------------------------------------------------------------
    def validate(self, res, obj):
        """Errors (list of SchemaError) of obj against res's schema."""
        errs = []
        if res.schema:
            sw = {"cdi.kubevirt.io": self.cdi, "networking.k8s.io": self.net,
                  "k8s.cni.cncf.io": self.multus}.get(res.group, self.kv)
            if sw is None:
                return errs
            self._sw(sw, sw.root(res.schema), obj, "", errs)
        elif res.model:
            if self.models.mod is None:
                return errs
            self._model(self.models.root(res.model), obj, "", errs)
        return errs

    @staticmethod
    def _json_type(v):
        if v is None:
            return "null"
        if isinstance(v, bool):
            return "boolean"
        if isinstance(v, int):
            return "integer"
        if isinstance(v, float):
            return "number"
        if isinstance(v, str):
            return "string"
        if isinstance(v, list):
            return "array"
        return "object"

    def _type_ok(self, want, v):
        got = self._json_type(v)
        if got == "null":
            return True
        if isinstance(want, list):
            return any(self._type_ok(w, v) for w in want if w != "null")
        if want == "number":
            return got in ("integer", "number")
        if want == "integer":
            return got == "integer" or (got == "number" and float(v).is_integer())
        return got == want

    def _sw(self, sw, s, v, path, errs):
        s = sw.resolve(s)
        if v is None or not isinstance(s, dict):
            return
        if s.get("x-quantity"):
            if not (isinstance(v, (int, float)) and not isinstance(v, bool)) and \
                    not (isinstance(v, str) and valid_quantity(v)):
                errs.append(SchemaError("format", path, "quantities must match the regular "
                                        "expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                                        v))
            return
        if s.get("x-int-or-string"):
            if not isinstance(v, (int, str)) or isinstance(v, bool):
                errs.append(SchemaError("type", path, "must be of type integer or string", v))
            return
        t = s.get("type")
        if t is None and "properties" not in s and "items" not in s:
            return  # free-form (RawExtension, JSON, ...)
        if t is None:
            t = "object" if "properties" in s else "array"
        if not self._type_ok(t, v):
            tt = t if isinstance(t, str) else [x for x in t if x != "null"][0]
            errs.append(SchemaError("type", path, f"must be of type {tt}", v))
            return
        if isinstance(v, dict):
            props = s.get("properties")
            addl = s.get("additionalProperties")
            for k, val in v.items():
                sub = f"{path}.{k}" if path else k
                if props is not None and k in props:
                    self._sw(sw, props[k], val, sub, errs)
                elif isinstance(addl, dict):
                    self._sw(sw, addl, val, sub, errs)
                elif addl is True or s.get("x-kubernetes-preserve-unknown-fields"):
                    continue
                elif props is None and addl is None:
                    continue  # "type: object" without properties: free-form map
                else:
                    errs.append(SchemaError("unknown", sub, "field not declared in schema"))
        elif isinstance(v, list) and "items" in s:
            for i, item in enumerate(v):
                self._sw(sw, s["items"], item, f"{path}[{i}]", errs)

    def _model(self, s, v, path, errs):
        if v is None or s is ANY or s.get("x-any"):
            return
        t = s.get("type")
        if not self._type_ok(t, v):
            errs.append(SchemaError("type", path, f"must be of type {t}", v))
            return
        if t == "array":
            it = self.models.of_type(s["_item"])
            for i, item in enumerate(v):
                self._model(it, item, f"{path}[{i}]", errs)
        elif t == "object" and "_value" in s:
            vt = self.models.of_type(s["_value"])
            for k, val in v.items():
                self._model(vt, val, f"{path}.{k}" if path else k, errs)
        elif t == "object":
            props = self.models.props(s)
            if props is None:
                return
            for k, val in v.items():
                sub = f"{path}.{k}" if path else k
                if k in props:
                    self._model(props[k], val, sub, errs)
                elif self._quantity_like(path):
                    continue
                else:
                    errs.append(SchemaError("unknown", sub, "field not declared in schema"))

    @staticmethod
    def _quantity_like(path):
        return False
