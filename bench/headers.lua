-- wrk script for bench/batteries.py: every request carries the headers given after "--",
-- each as "Name: value", so that a route with a battery and the same route without it
-- get the same request and differ by the battery only.
--   wrk -t1 -c64 -d5s -s bench/headers.lua http://127.0.0.1:8000/x -- 'Accept-Encoding: gzip'
function init(args)
   for _, line in ipairs(args) do
      local name, value = line:match("^([^:]+):%s*(.*)$")
      if name == nil then
         error("headers.lua: give headers as 'Name: value', not " .. line)
      end
      wrk.headers[name] = value
   end
end
