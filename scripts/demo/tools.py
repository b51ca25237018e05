#!/usr/bin/env python3
"""Demo tool executor for `mimo chat --tool-exec`: reads one call {"name", "arguments"} on stdin,
prints the tool's JSON result. Deterministic fake data (no network): the point is the round trip."""
import json
import sys
import zlib

CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "snowy", "foggy"]


def _h(s):
    return zlib.crc32(s.encode())


def get_weather(city):
    return {"city": city, "temperature": _h(city) % 36 - 5, "condition": CONDITIONS[_h(city) % 6]}


def calculator(expression):
    a, op, b = expression.split()
    a, b = int(a), int(b)
    return {"result": {"+": a + b, "-": a - b, "*": a * b}[op]}


def lookup_person(name):
    return {"name": name, "city": "Lindor", "age": 18 + _h(name) % 70}


def send_message(to, text):
    return {"status": "sent", "to": to}


def main():
    call = json.load(sys.stdin)
    fn = {"get_weather": get_weather, "calculator": calculator, "lookup_person": lookup_person,
          "send_message": send_message}.get(call["name"])
    if fn is None:
        print(json.dumps({"error": f"unknown tool {call['name']}"}))
        return
    print(json.dumps(fn(**call["arguments"])))


if __name__ == "__main__":
    main()
