#!/usr/bin/env bash
echo first > /work/notes.txt
