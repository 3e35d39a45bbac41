"""nginx serving the files benchmark's directory (bench/uploads.py): the limit a Python server is measured against.

Writes a configuration for one worker process (the contenders have one process each) in the
prefix folder it is given and becomes nginx (exec: the same pid, so the benchmark counts its CPU with
its worker's).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

CONFIG = """
worker_processes 1;
daemon off;
master_process on;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    include /etc/nginx/mime.types;
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location /files/ {{ alias {root}/; etag on; }}
        location = /ready {{ return 200 '{{"ready": true}}'; }}
    }}
}}
"""

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--prefix", required=True, help="an empty folder for nginx's files; the caller removes it")
    args = parser.parse_args()
    prefix = Path(args.prefix).resolve()
    conf = prefix / "nginx.conf"
    conf.write_text(CONFIG.format(prefix=prefix, port=args.port, root=Path(args.root).resolve()))
    os.execv("/usr/sbin/nginx", ["nginx", "-p", str(prefix), "-c", str(conf)])
