-- wrk script for bench/uploads.py: POST the body in the file named after "--", with the Content-Type after it.
--   wrk -t1 -c16 -d5s -s bench/upload.lua http://127.0.0.1:8000/upload -- /tmp/x/1m.body 'multipart/form-data; boundary=...'
wrk.method = "POST"

function init(args)
   if args[2] == nil then
      error("upload.lua: give the body's file and its Content-Type after --")
   end
   local file = assert(io.open(args[1], "rb"))
   wrk.body = file:read("*a")
   file:close()
   wrk.headers["Content-Type"] = args[2]
end
