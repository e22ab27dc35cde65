"""A scripted OpenAI-compatible chat endpoint for the client's fault tests (loopback only).

    python tests/fake_openai.py --port P --log LOG [--key K] [--faults] [--delay S] [--stall S]

Each distinct request body (by SHA-256) gets an arrival index i. With `--faults`, its first
attempt gets fault FAULTS[i % len(FAULTS)]: 429 with Retry-After: 1, 500, 503, a stall of
`--stall` seconds (past the client's timeout), a malformed body; a retry then succeeds.
"truncated" (finish_reason "length") and "empty" (content "") are answers, on every
attempt. A request without `Authorization: Bearer K` gets 401. Every request is appended
to LOG as {"hash", "status"}; answers carry `id` = the body hash. Answers bill
`completion_tokens` = visible tokens (whitespace words) + 7 hidden reasoning tokens.
"""

import argparse
import asyncio
import hashlib
import json

import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

FAULTS = ("429", "500", "503", "stall", "malformed", "truncated", "empty", None, None)
HIDDEN = 7


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--key", default="")
    ap.add_argument("--faults", action="store_true")
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--stall", type=float, default=3.0)
    args = ap.parse_args()
    arrivals, attempts = {}, {}
    log = open(args.log, "a")

    def record(h, status):
        log.write(json.dumps({"hash": h, "status": status}) + "\n")
        log.flush()

    async def chat(request):
        raw = await request.body()
        h = hashlib.sha256(raw).hexdigest()
        if args.key and request.headers.get("authorization") != f"Bearer {args.key}":
            record(h, 401)
            return JSONResponse({"error": {"message": "Incorrect API key provided: " +
                                           request.headers.get("authorization", "")[7:]}}, status_code=401)
        body = json.loads(raw)
        index = arrivals.setdefault(h, len(arrivals))
        attempts[h] = attempts.get(h, 0) + 1
        fault = FAULTS[index % len(FAULTS)] if args.faults else None
        first = attempts[h] == 1
        if args.delay:
            await asyncio.sleep(args.delay)
        if first and fault in ("429", "500", "503"):
            record(h, int(fault))
            headers = {"Retry-After": "1"} if fault == "429" else {}
            return JSONResponse({"error": {"message": f"scripted {fault}"}}, status_code=int(fault), headers=headers)
        if first and fault == "stall":
            record(h, "stall")
            await asyncio.sleep(args.stall)
            return JSONResponse({"error": {"message": "too late"}}, status_code=500)
        if first and fault == "malformed":
            record(h, "malformed")
            return Response('{"choices": [', media_type="application/json")
        text = "" if fault == "empty" else f"The sum is {index % 10}. The answer is \\boxed{{{index % 10}}}."
        finish = "length" if fault == "truncated" else "stop"
        words = len(text.split())
        prompt = sum(len(m.get("content", "").split()) for m in body.get("messages", []))
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
        if body.get("logprobs"):
            choice["logprobs"] = {"content": [{"token": "7", "logprob": -0.1, "top_logprobs": [
                {"token": "7", "logprob": -0.1}, {"token": "3", "logprob": -2.5}]}]}
        record(h, 200)
        return JSONResponse({"id": h, "object": "chat.completion", "model": body.get("model"), "choices": [choice],
                             "usage": {"prompt_tokens": prompt, "completion_tokens": words + HIDDEN,
                                       "total_tokens": prompt + words + HIDDEN,
                                       "completion_tokens_details": {"reasoning_tokens": HIDDEN}}})

    async def health(_):
        return JSONResponse({"status": "ok"})

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/health", health)])
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="error")


if __name__ == "__main__":
    main()
