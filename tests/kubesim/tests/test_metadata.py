#!/usr/bin/python3
"""kubesim: metadata-only answers, as client-go's metadata client asks for them
(Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1):
items with metadata and nothing else; a fallback media range is honoured;
a metadata-only Accept that does not fit is 406 (timeout: 60)."""
from simlib import SECRETS, Sim, secret
from tap import T

t = T()
sim = Sim(guest="none", seed=False)
A = sim.admin
META_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
META = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


@t.test
def metadata_list():
    for i in range(3):
        r = A.post(SECRETS, secret(f"meta-{i}", "x" * 1000))
        t.eq(r.status, 201, f"secret {i}", r)
    r = A.get(SECRETS, headers={"Accept": META_LIST + ",application/json"})
    t.eq(r.status, 200, "listed", r)
    t.eq((r.json["kind"], r.json["apiVersion"]), ("PartialObjectMetadataList", "meta.k8s.io/v1"),
         "a PartialObjectMetadataList")
    items = [i for i in r.json["items"] if i["metadata"]["name"].startswith("meta-")]
    t.eq(len(items), 3, "every item")
    t.ok(all(set(i) == {"kind", "apiVersion", "metadata"} and
             i["kind"] == "PartialObjectMetadata" for i in items), "metadata only", items[0])
    t.ok(all(i["metadata"].get("uid") and i["metadata"].get("labels") for i in items),
         "uid and labels kept")
    t.ok(r.json["metadata"].get("resourceVersion"), "the list's resourceVersion")
    full = A.get(SECRETS)
    t.eq(full.json["kind"], "SecretList", "plain JSON is still the full list")
    t.ok(len(full.raw) > len(r.raw) + 2000, "the metadata answer is smaller",
         (len(full.raw), len(r.raw)))


@t.test
def metadata_get_and_406():
    r = A.get(SECRETS + "/meta-0", headers={"Accept": META})
    t.eq((r.status, r.json.get("kind")), (200, "PartialObjectMetadata"), "one object", r)
    t.ok("data" not in r.json, "no data")
    r = A.get(SECRETS, headers={"Accept": META})
    t.eq(r.status, 406, "PartialObjectMetadata (not ...List) for a list is 406", r)
    r = A.get(SECRETS, headers={"Accept": META + ",application/json"})
    t.eq((r.status, r.json.get("kind")), (200, "SecretList"), "with a fallback: the full list")


sim.stop()
t.done()
