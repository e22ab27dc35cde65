"""A scripted OpenAI-compatible chat endpoint for the client's fault tests (loopback only).

    python tests/fake_openai.py --port P --log LOG [--key K] [--faults] [--delay S] [--stall S]
                                [--mode chat|reasoning|gemini]

Each distinct request body (by SHA-256) gets an arrival index i. With `--faults`, its first
attempt gets fault FAULTS[i % len(FAULTS)]: 429 with Retry-After: 1, 500, 503, a stall of
`--stall` seconds (past the client's timeout), a malformed body; a retry then succeeds.
"truncated" (finish_reason "length") and "empty" (content "") are answers, on every
attempt. A request without `Authorization: Bearer K` gets 401. Every request is appended
to LOG as {"hash", "status"}; answers carry `id` = the body hash. Answers bill
`completion_tokens` = visible tokens (whitespace words) + 7 hidden reasoning tokens.

Modes model real endpoints (each log entry also keeps the request's field names, "fields"):
- chat: the above, `usage.completion_tokens_details.reasoning_tokens` = 7;
- reasoning: OpenAI's o-series: a 400 `{"error": {"message": "Unsupported parameter: 'X' is
  not supported with this model.", "param": "X", "code": "unsupported_parameter"}}` for
  `max_tokens`, `temperature`, `top_p`, `logprobs`, `top_logprobs`, and "Unrecognized request
  argument supplied: X" for fields OpenAI does not define (`top_k`, `continue_final_message`);
- gemini: thought tokens (11) are not in `completion_tokens` (the visible words) but in
  `total_tokens`, with no details; `logprobs` and `top_k` get a 400 naming them.
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
THOUGHTS = 11
REFUSED = {"reasoning": ("max_tokens", "temperature", "top_p", "logprobs", "top_logprobs"),
           "gemini": ("logprobs", "top_logprobs", "top_k")}
OPENAI_FIELDS = {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed",
                 "logprobs", "top_logprobs", "reasoning_effort", "n", "stop", "stream", "extra_body"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--key", default="")
    ap.add_argument("--faults", action="store_true")
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--stall", type=float, default=3.0)
    ap.add_argument("--mode", choices=("chat", "reasoning", "gemini"), default="chat")
    args = ap.parse_args()
    arrivals, attempts = {}, {}
    log = open(args.log, "a")

    def record(h, status, body=None):
        log.write(json.dumps({"hash": h, "status": status, "fields": sorted(body or {})}) + "\n")
        log.flush()

    def refuse(h, body):
        """The 400 the mode's real endpoint gives `body`, or None."""
        for name in REFUSED.get(args.mode, ()):
            if name in body:
                record(h, 400, body)
                return JSONResponse({"error": {"message": f"Unsupported parameter: '{name}' is not supported with "
                                               "this model.", "type": "invalid_request_error", "param": name,
                                               "code": "unsupported_parameter"}}, status_code=400)
        unknown = sorted(set(body) - OPENAI_FIELDS) if args.mode == "reasoning" else []
        if unknown:
            record(h, 400, body)
            return JSONResponse({"error": {"message": f"Unrecognized request argument supplied: {unknown[0]}",
                                           "type": "invalid_request_error", "param": None}}, status_code=400)
        return None

    async def chat(request):
        raw = await request.body()
        h = hashlib.sha256(raw).hexdigest()
        if args.key and request.headers.get("authorization") != f"Bearer {args.key}":
            record(h, 401)
            return JSONResponse({"error": {"message": "Incorrect API key provided: " +
                                           request.headers.get("authorization", "")[7:]}}, status_code=401)
        body = json.loads(raw)
        refused = refuse(h, body)
        if refused is not None:
            return refused
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
        record(h, 200, body)
        usage = {"prompt_tokens": prompt, "completion_tokens": words + HIDDEN, "total_tokens": prompt + words + HIDDEN,
                 "completion_tokens_details": {"reasoning_tokens": HIDDEN}}
        if args.mode == "gemini":
            usage = {"prompt_tokens": prompt, "completion_tokens": words, "total_tokens": prompt + words + THOUGHTS}
        return JSONResponse({"id": h, "object": "chat.completion", "model": body.get("model"), "choices": [choice],
                             "usage": usage})

    async def health(_):
        return JSONResponse({"status": "ok"})

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/health", health)])
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="error")


if __name__ == "__main__":
    main()
