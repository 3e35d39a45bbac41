-- wrk: count the answers by status, and the 503s without Retry-After; printed as one JSON line at the end.
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  s200, s503, other, no_retry_after = 0, 0, 0, 0
end

function response(status, headers, body)
  if status == 200 then
    s200 = s200 + 1
  elseif status == 503 then
    s503 = s503 + 1
    if headers["Retry-After"] == nil and headers["retry-after"] == nil then
      no_retry_after = no_retry_after + 1
    end
  else
    other = other + 1
  end
end

function done(summary, latency, requests)
  local t = {s200 = 0, s503 = 0, other = 0, no_retry_after = 0}
  for _, thread in ipairs(threads) do
    for key, _ in pairs(t) do
      t[key] = t[key] + thread:get(key)
    end
  end
  io.write(string.format('{"200": %d, "503": %d, "other": %d, "no_retry_after": %d, "socket_errors": %d}\n',
    t.s200, t.s503, t.other, t.no_retry_after,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
