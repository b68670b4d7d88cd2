#!/bin/sh
echo "hello from the oracle" > hello.txt
