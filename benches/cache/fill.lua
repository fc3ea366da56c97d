-- wrk script for the memory section: request FILL_PATH?fill=1 … FILL_PATH?fill=FILL_N once each
-- (distinct cache keys, one small object), then write "responses non200" to FILL_OUT and exit
-- (wrk would otherwise sleep out its -d duration). Run with -t1 so one counter covers the range.
local path = os.getenv("FILL_PATH")
local total = tonumber(os.getenv("FILL_N"))
local out = os.getenv("FILL_OUT")
local sent, received, bad = 0, 0, 0

function request()
  sent = sent + 1
  -- Connections still open after the last key re-ask key 1 (a hit) until the exit.
  local n = sent <= total and sent or 1
  return wrk.format("GET", path .. "?fill=" .. n)
end

function response(status)
  received = received + 1
  if status ~= 200 then
    bad = bad + 1
  end
  if received >= total then
    local f = assert(io.open(out, "w"))
    f:write(received, " ", bad, "\n")
    f:close()
    os.exit(0)
  end
end
