/* SPDX-License-Identifier: MIT */
/*
 * lvmeta-dl: libvirt and libxml2, loaded (lib/dlopen.h) when lvmeta first
 * has a libvirt guest to follow, so a host with no libvirt guest, or with
 * neither libvirt_events nor the fleet's libvirt_labels, maps neither.
 * lvmeta's files include this instead of libvirt's and libxml2's headers:
 * each function named below is then a call through its pointer, NULL
 * until lvmeta_dl_open() (lvmeta.h) succeeded. A function newly called must join
 * both lists (the build says so).
 */
#ifndef VMT_LVMETA_DL_H
#define VMT_LVMETA_DL_H

#include <stdbool.h>
#include <stddef.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <libxml/parser.h>
#include <libxml/tree.h>

#define VMT_DLVIRT_SONAME "libvirt.so.0"
#define VMT_DLXML_SONAME "libxml2.so.2"

#define VMT_DLVIRT_SYMS(X) \
	X(virConnectClose) \
	X(virConnectDomainEventDeregisterAny) \
	X(virConnectDomainEventRegisterAny) \
	X(virConnectIsAlive) \
	X(virConnectOpenReadOnly) \
	X(virConnectRegisterCloseCallback) \
	X(virConnectSetKeepAlive) \
	X(virConnectUnregisterCloseCallback) \
	X(virDomainFree) \
	X(virDomainGetID) \
	X(virDomainGetMetadata) \
	X(virDomainGetName) \
	X(virDomainLookupByID) \
	X(virDomainLookupByName) \
	X(virEventAddHandle) \
	X(virEventAddTimeout) \
	X(virEventRegisterDefaultImpl) \
	X(virEventRemoveHandle) \
	X(virEventRemoveTimeout) \
	X(virEventRunDefaultImpl) \
	X(virEventUpdateTimeout) \
	X(virGetLastError) \
	X(virGetLastErrorMessage) \
	X(virInitialize) \
	X(virSetErrorFunc)

#define VMT_DLXML_SYMS(X) \
	X(xmlCtxtGetLastError) \
	X(xmlCtxtReadMemory) \
	X(xmlDocGetRootElement) \
	X(xmlFreeDoc) \
	X(xmlFreeParserCtxt) \
	X(xmlNewParserCtxt)

#define VMT_LVMETA_DL_DECLARE(f) extern __typeof__(f) *sym_##f;
VMT_DLVIRT_SYMS(VMT_LVMETA_DL_DECLARE)
VMT_DLXML_SYMS(VMT_LVMETA_DL_DECLARE)
#undef VMT_LVMETA_DL_DECLARE

#ifndef VMT_LVMETA_DL_IMPL
#define virConnectClose sym_virConnectClose
#define virConnectDomainEventDeregisterAny sym_virConnectDomainEventDeregisterAny
#define virConnectDomainEventRegisterAny sym_virConnectDomainEventRegisterAny
#define virConnectIsAlive sym_virConnectIsAlive
#define virConnectOpenReadOnly sym_virConnectOpenReadOnly
#define virConnectRegisterCloseCallback sym_virConnectRegisterCloseCallback
#define virConnectSetKeepAlive sym_virConnectSetKeepAlive
#define virConnectUnregisterCloseCallback sym_virConnectUnregisterCloseCallback
#define virDomainFree sym_virDomainFree
#define virDomainGetID sym_virDomainGetID
#define virDomainGetMetadata sym_virDomainGetMetadata
#define virDomainGetName sym_virDomainGetName
#define virDomainLookupByID sym_virDomainLookupByID
#define virDomainLookupByName sym_virDomainLookupByName
#define virEventAddHandle sym_virEventAddHandle
#define virEventAddTimeout sym_virEventAddTimeout
#define virEventRegisterDefaultImpl sym_virEventRegisterDefaultImpl
#define virEventRemoveHandle sym_virEventRemoveHandle
#define virEventRemoveTimeout sym_virEventRemoveTimeout
#define virEventRunDefaultImpl sym_virEventRunDefaultImpl
#define virEventUpdateTimeout sym_virEventUpdateTimeout
#define virGetLastError sym_virGetLastError
#define virGetLastErrorMessage sym_virGetLastErrorMessage
#define virInitialize sym_virInitialize
#define virSetErrorFunc sym_virSetErrorFunc
#define xmlCtxtGetLastError sym_xmlCtxtGetLastError
#define xmlCtxtReadMemory sym_xmlCtxtReadMemory
#define xmlDocGetRootElement sym_xmlDocGetRootElement
#define xmlFreeDoc sym_xmlFreeDoc
#define xmlFreeParserCtxt sym_xmlFreeParserCtxt
#define xmlNewParserCtxt sym_xmlNewParserCtxt
#endif

#endif
