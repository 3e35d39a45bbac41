-- Every request asks for gzip, so that the routes with and without Compression differ only by it.
wrk.headers["Accept-Encoding"] = "gzip"
