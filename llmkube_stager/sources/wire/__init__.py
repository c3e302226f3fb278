"""The HTTP transport every scheme uses (#23 item 2).

The plain http(s) source, the Hugging Face source (its `/resolve/` bytes
and its hub client) and the S3 source (its presigned GETs) all reach the
network through this package; it imports no scheme.

- `fetcher.py`: `HttpFetcher`, the ranged reads over the wire;
- `exchange.py`: GET and HEAD with redirects by hand, the response body;
- `connection.py`: keep-alive connections per origin, CONNECT tunnels;
- `errors.py`: network failures -> `SourceError`, by type;
- `probe.py`: what a HEAD says (and the httpx HEAD probe);
- `httpx_proxy.py`: the routing transport of every httpx client;
- `status.py`, `ratelimit.py`, `coding.py`: pure header, status and URL math;
- `tls.py`: the system roots plus LLMKUBE_CA_DIR.

Nothing here is imported on a warm start but the pure `status.py` (and
`ratelimit.py`): http.client, ssl and httpx come with the first fetcher.
"""
