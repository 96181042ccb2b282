-- wrk script: each request asks GET /api/queue/status about the next of USERS
-- waiting users (u-0 .. u-<USERS-1> on queue QUEUE), so no two requests in a row
-- name the same person.
local users = tonumber(os.getenv("USERS") or "10000")
local queue = os.getenv("QUEUE") or "crowd"
local i = math.random(users) - 1
request = function()
  i = (i + 1) % users
  return wrk.format("GET", "/api/queue/status?queue=" .. queue .. "&userId=u-" .. i)
end
