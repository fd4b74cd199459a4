-- POST /add, one task a request: a 100-byte body due in 1 h, a new id each time.
local counter = 0
local body = string.rep("x", 100)
local run = tostring(os.time())
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
    counter = counter + 1
    local task = string.format(
        '{"topic":"wrk-add-%s","id":"w%012d","body":"%s","delay_ms":3600000}', run, counter, body)
    return wrk.format(nil, "/add", nil, task)
end
