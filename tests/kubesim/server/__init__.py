"""kubesim's API server, by part:

    app.py           Sim (store, API server, RBAC, controllers, tokens, faults),
                     bootstrap, seeds, state files; the threaded TLS server
    httpio.py        HTTP/1.1 over TLS: bodies, answers, Dropped
    handlers.py      authentication, routing of the real API paths, faults, the verbs
    watch.py         watch streams
    discovery.py     /version, /api, /apis..., /openapi/v2, health
    subresources.py  subresources.kubevirt.io: VM start/stop/restart, VMI console
    streams.py       upgraded connections: the console WebSocket (wsproto)
    admin.py         the admin-only /_sim endpoints
    cli.py           the command line, start-up and shutdown (main)
"""
