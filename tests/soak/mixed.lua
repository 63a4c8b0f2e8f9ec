-- wrk workload for `make soak`: a mix of what users send, cycled per connection.
-- Cheap service endpoints, listings, cached analyses (304 with If-None-Match
-- too), and a little real work on small selections.
local paths = {
  "/healthz",
  "/readyz",
  "/v1/models",
  "/v1/models/gpt2-small/matrices/wpe",
  "/v1/models/gpt2-small/matrices/wpe/spectrum",
  "/v1/models/gpt2-small/matrices/wpe/pca?k=3&rows=1:",
  "/v1/models/gpt2-small/matrices/wpe/cosine?row=5&rows=0:256",
  "/v1/models/sinusoidal/matrices/pe/spectrum",
  "/v1/models/gpt2-small/matrices/wpe/vectors?k=2",
  "/metrics",
}
local i = 0

request = function()
  i = i + 1
  local path = paths[(i % #paths) + 1]
  -- small uncached work now and then: a fresh row selection
  if i % 50 == 0 then
    path = "/v1/models/gpt2-small/matrices/wpe/spectrum?rows=" .. (i % 200) .. ":" .. (i % 200 + 300)
  end
  return wrk.format("GET", path, {["Accept-Encoding"] = "gzip"})
end
