"""Turn NoCloud user-data into the plan a simulated guest's init executes, in
cloud-init's order: init stage (bootcmd, write_files), config stage (runcmd is
written to /var/lib/cloud/instance/scripts/runcmd), final stage
(write_files_deferred, then scripts_user runs the runcmd script, then the final
message). Parsing happens outside the guest; the guest init only executes."""
import base64
import gzip
import shlex

try:
    import yaml
except ImportError:  # pragma: no cover - python3-yaml is a dependency
    yaml = None


def _cmd_line(c):
    if isinstance(c, list):
        return " ".join(shlex.quote(str(x)) for x in c)
    return str(c)


def _decode(content, encoding):
    enc = (encoding or "text/plain").lower()
    if isinstance(content, bytes):
        data = content
    else:
        data = ("" if content is None else str(content)).encode()
    if enc in ("b64", "base64"):
        return base64.b64decode(data)
    if enc in ("gz", "gzip"):
        return gzip.decompress(data)
    if enc in ("gz+base64", "gzip+base64", "gz+b64", "gzip+b64"):
        return gzip.decompress(base64.b64decode(data))
    return data


def plan(userdata, hostname, env):
    """userdata bytes -> dict plan (JSON-serialisable)."""
    p = {"hostname": hostname, "env": env, "bootcmd": [], "write_files": [], "runcmd": [],
         "script": None, "errors": []}
    if userdata is None:
        return p
    if isinstance(userdata, str):
        userdata = userdata.encode()
    if userdata[:2] == b"\x1f\x8b":
        userdata = gzip.decompress(userdata)
    text = userdata.decode("utf-8", "replace")
    first = text.split("\n", 1)[0].strip()
    if first.startswith("#!"):
        p["script"] = base64.b64encode(userdata).decode()
        return p
    if not first.startswith("#cloud-config"):
        p["errors"].append(f"Unhandled non-multipart (text/x-not-multipart) userdata: '{first[:40]}...'")
        return p
    try:
        cfg = yaml.safe_load(text) or {}
    except Exception as e:  # noqa: BLE001 - cloud-init logs and goes on
        p["errors"].append(f"Failed loading yaml blob. {e}")
        return p
    if not isinstance(cfg, dict):
        p["errors"].append("cloud-config is not a mapping")
        return p
    for c in cfg.get("bootcmd") or []:
        p["bootcmd"].append(_cmd_line(c))
    for c in cfg.get("runcmd") or []:
        p["runcmd"].append(_cmd_line(c))
    for i, f in enumerate(cfg.get("write_files") or []):
        if not isinstance(f, dict) or not f.get("path"):
            p["errors"].append(f"write_files[{i}]: no path")
            continue
        try:
            data = _decode(f.get("content", ""), f.get("encoding"))
        except Exception as e:  # noqa: BLE001
            p["errors"].append(f"write_files[{i}] {f.get('path')}: cannot decode: {e}")
            continue
        perms = f.get("permissions", "0644")
        try:
            mode = int(str(perms), 8) if not isinstance(perms, int) else int(str(perms), 8)
        except ValueError:
            p["errors"].append(f"write_files[{i}] {f['path']}: bad permissions {perms!r}")
            mode = 0o644
        p["write_files"].append({
            "path": str(f["path"]), "content": base64.b64encode(data).decode(), "mode": mode,
            "owner": str(f.get("owner") or "root:root"), "append": bool(f.get("append")),
            "defer": bool(f.get("defer")),
        })
    p["final_message"] = cfg.get("final_message")
    return p
