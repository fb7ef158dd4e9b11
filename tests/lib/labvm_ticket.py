"""Console tickets minted in Python, byte-compatible with fcgi-app/core/ticket.c.

    "v1." b64url(payload) "." b64url(HMAC-SHA256(key, "v1." b64url(payload)))
    payload = {"sid", "u", "vm", "exp", "n"}   (compact JSON, this key order)

The key is the content of ticket_key_file with trailing whitespace stripped
(as config.c loads it). Tests use this for the cases the API never produces:
forged signatures, expired tickets, another user's ticket. Tickets are
secrets: never print them.
"""
import base64
import hashlib
import hmac
import json
import os
import secrets
import time


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def load_key(path=None, conf=None):
    """The ticket key from ticket_key_file (named in labvm.conf if path is None)."""
    if path is None:
        conf = conf or os.environ["LABVM_CONF"]
        with open(conf) as f:
            for line in f:
                k, _, v = line.partition("=")
                if k.strip() == "ticket_key_file":
                    path = v.strip()
        if path is None:
            raise KeyError(f"no ticket_key_file in {conf}")
    with open(path, "rb") as f:
        return f.read().rstrip()


def make(key, sid, user, vm, exp=None, ttl=30, nonce=None):
    """A ticket; exp (epoch s) defaults to now + ttl."""
    if exp is None:
        exp = int(time.time()) + ttl
    payload = json.dumps({"sid": sid, "u": user, "vm": vm, "exp": exp,
                          "n": nonce or secrets.token_hex(16)}, separators=(",", ":"))
    signed = "v1." + b64url(payload.encode())
    mac = hmac.new(key, signed.encode(), hashlib.sha256).digest()
    return signed + "." + b64url(mac)


def forge(ticket):
    """The same ticket with a wrong signature (last MAC byte flipped)."""
    head, _, mac = ticket.rpartition(".")
    raw = bytearray(base64.urlsafe_b64decode(mac + "=" * (-len(mac) % 4)))
    raw[-1] ^= 1
    return head + "." + b64url(bytes(raw))


def decode(ticket):
    """The payload (dict) of a ticket, signature not checked."""
    p = ticket.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4)))
