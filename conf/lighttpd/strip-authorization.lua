-- labvm: the student's password (Authorization: Basic) stops at lighttpd.
-- mod_auth has read it by the time this runs (magnet.attract-physical-path-to
-- comes after mod_auth's check); labvm.fcgi (HTTP_AUTHORIZATION) and
-- labvm-console (the WebSocket upgrade) must not get it. mod_setenv cannot
-- do this: it edits request headers before mod_auth runs, and it must come
-- first so that mod_auth's 401 carries the security headers too.
-- Debian 12: package lighttpd-modules-lua (mod_magnet).
lighty.r.req_header["Authorization"] = nil
lighty.r.req_header["Proxy-Authorization"] = nil
return 0
