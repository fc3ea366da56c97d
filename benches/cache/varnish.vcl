# Varnish 7.1 in front of `capstan origin`: one backend, the built-in VCL for everything else
# (it caches GET/HEAD responses with a lifetime and no Set-Cookie; wrk and the benchmark's
# clients send no cookies, so nothing needs stripping). Rendered by benches/cache.sh.
vcl 4.1;

backend origin {
    .host = "127.0.0.1";
    .port = "@ORIGIN_PORT@";
}

sub vcl_deliver {
    # A hit/miss marker for the script's header sample (the script's hit ratio comes from the
    # origin's own request count, not from this header).
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
}
