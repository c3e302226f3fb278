"""What the tests share, and the only place they import helpers from (#23
item 5): never shipped in the wheel or the image. A test directory holds its
tests, its conftest (fixtures only) and nothing else, but for the image's
tests/image/probe.py (it runs inside the image) and measure.py (a script).

- running the agent: pod (one runner, one `Run`), audit, pause, venvs;
  `make demo`: demo;
- the world outside, on loopback: origin, rawhttp, relay, proxy, hub,
  seaweed + s3front + sts, tlsca (loopback and lifecycle: the servers'
  skeleton), upstream_matcher (the old controller's reading of a failure);
- storage: disk (what a run left), mounts, objmounts, blockdev, features;
- what the tests know independently of the code: contract, schema, canary;
- inputs and scenarios: sample, plan_inputs, modelsets, sharded_hub,
  stamp_race, sandbox, s3fetcher; the torture suite's torture and promise;
- the image: image (buildah runs of the built image).
"""
