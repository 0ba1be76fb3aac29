-- wrk script for tests/bench/run.sh: POST one chat completion per request
-- to the URL given on the wrk command line (path included).
--
-- Configured from the environment (run.sh sets these on the wrk command line):
--   BENCH_BODY    the JSON request body (required)
--   BENCH_KEY     API key, sent as "Authorization: Bearer KEY" (optional)
--   BENCH_STREAM  "1" when the body asks for an SSE stream
--
-- Every response is checked:
--   non2xx  status outside 200..299
--   bad     a 2xx whose body is not a complete answer: a stream without the
--           final "data: [DONE]" or with an in-band error event; a JSON
--           answer without "choices"
-- done() prints one machine-readable line (latencies in microseconds):
--   BENCH_RESULT requests=N duration_us=N rps=X p50_us=N p90_us=N p99_us=N
--                max_us=N non2xx=N bad=N connect=N read=N write=N timeout=N
-- and, when something was wrong, BENCH_FIRST_BAD <status> <start of body>.

local body = os.getenv("BENCH_BODY")
if body == nil or body == "" then
   error("BENCH_BODY is not set")
end
local key = os.getenv("BENCH_KEY")
local stream = os.getenv("BENCH_STREAM") == "1"

wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = stream and "text/event-stream" or "application/json"
if key ~= nil and key ~= "" then
   wrk.headers["Authorization"] = "Bearer " .. key
end

-- setup() and done() run in wrk's main Lua state; init() and response() in
-- each thread's own state. Counters travel back with thread:get().
local threads = {}

function setup(thread)
   table.insert(threads, thread)
end

function init(args)
   non2xx = 0
   bad = 0
   first_bad = ""
end

local function note(status, b)
   if first_bad == "" then
      first_bad = tostring(status) .. " " .. string.sub(b or "", 1, 300)
   end
end

function response(status, headers, b)
   if status < 200 or status > 299 then
      non2xx = non2xx + 1
      note(status, b)
   elseif stream then
      if not string.find(b, "data: [DONE]", 1, true)
         or string.find(b, 'data: {"error"', 1, true) then
         bad = bad + 1
         note(status, b)
      end
   elseif not string.find(b, '"choices"', 1, true) then
      bad = bad + 1
      note(status, b)
   end
end

function done(summary, latency, requests)
   local n2, nb, fb = 0, 0, ""
   for _, t in ipairs(threads) do
      n2 = n2 + (t:get("non2xx") or 0)
      nb = nb + (t:get("bad") or 0)
      if fb == "" then
         fb = t:get("first_bad") or ""
      end
   end
   local e = summary.errors
   local secs = summary.duration / 1e6
   local rps = 0
   if secs > 0 then
      rps = summary.requests / secs
   end
   local function pct(p)
      return math.floor(latency:percentile(p) + 0.5)
   end
   io.write(string.format(
      "BENCH_RESULT requests=%d duration_us=%d rps=%.1f p50_us=%d p90_us=%d"
         .. " p99_us=%d max_us=%d non2xx=%d bad=%d connect=%d read=%d"
         .. " write=%d timeout=%d\n",
      summary.requests, summary.duration, rps, pct(50), pct(90), pct(99),
      math.floor(latency.max), n2, nb, e.connect, e.read, e.write, e.timeout))
   if fb ~= "" then
      local flat = string.gsub(fb, "[\r\n]+", " ")
      io.write("BENCH_FIRST_BAD " .. flat .. "\n")
   end
end
