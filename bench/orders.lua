-- wrk script for bench/typed.py: POST the JSON body given after "--" (one request, built once).
--   wrk -t1 -c64 -d5s -s bench/orders.lua 'http://127.0.0.1:8000/orders?source=web' -- '{"customer": ...}'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

function init(args)
   if args[1] == nil then
      error("orders.lua: give the body after --")
   end
   wrk.body = args[1]
end
