"""Scrapes a Prometheus endpoint and parses it with prometheus_client's text
parser (a parser not written in this project), to check the runner's
/metrics as Prometheus itself would read it.

Prints one JSON object: {"content_type": ..., "families": {name: {"type": ...,
"samples": [{"name": ..., "labels": {...}, "value": ...}]}}}. Values are
numbers; +Inf is printed as the string "+Inf".

Usage: scrape_metrics.py URL
"""

import json
import math
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def number(v):
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return v


def main():
    url = sys.argv[1]
    with urllib.request.urlopen(url, timeout=10) as resp:
        content_type = resp.headers.get("Content-Type", "")
        text = resp.read().decode("utf-8")
    families = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = {
            "type": family.type,
            "samples": [
                {"name": s.name, "labels": dict(s.labels), "value": number(s.value)}
                for s in family.samples
            ],
        }
    print(json.dumps({"content_type": content_type, "families": families}))


if __name__ == "__main__":
    main()
